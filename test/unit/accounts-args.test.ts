/**
 * `subscriber-mirror accounts` arguments: what to do, or a usage error (exit 2) before anything is
 * read or removed.
 */
import { describe, expect, it } from 'vitest';
import { parseAccountsArgs } from '../../src/commands/accounts.js';
import { UsageError } from '../../src/ground/usage-error.js';

describe('parseAccountsArgs', () => {
  it('reads list, and remove with or without --yes', () => {
    expect(parseAccountsArgs(['list'])).toEqual({ action: 'list' });
    expect(parseAccountsArgs(['remove', 'shop'])).toEqual({ action: 'remove', account: 'shop', yes: false });
    expect(parseAccountsArgs(['remove', 'shop_eu', '--yes'])).toEqual({ action: 'remove', account: 'shop_eu', yes: true });
    expect(parseAccountsArgs(['--yes', 'remove', 'b2'])).toEqual({ action: 'remove', account: 'b2', yes: true });
  });

  it.each([
    [[], /usage: subscriber-mirror accounts list \| remove NAME \[--yes\]/],
    [['remove'], /usage/],
    [['remove', 'a', 'b'], /usage/],
    [['list', 'shop'], /usage/],
    [['list', '--yes'], /usage/],
    [['purge', 'shop'], /usage/],
    [['remove', 'shop', '--force'], /Unknown option '--force'/],
    [['remove', 'Shop'], /accounts remove: invalid account name "Shop".*; nothing changed/],
    [['remove', 'a__b'], /invalid account name "a__b"/],
    [['remove', '1shop'], /invalid account name "1shop"/],
  ])('refuses %j', (args, message) => {
    expect(() => parseAccountsArgs(args)).toThrow(UsageError);
    expect(() => parseAccountsArgs(args)).toThrow(message);
  });
});
