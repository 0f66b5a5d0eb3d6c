/**
 * The account a command serves (`--account NAME`, docs/operations.md, "Several accounts"): the one
 * named, or the only one declared. Several declared and none named, or a name not declared, is an
 * AccountChoiceError (exit 2) before anything is read or changed.
 */
import { accountConfig, accountPrefix, DEFAULT_ACCOUNT, findAccount, loadConfig, type Config, type ConfigNeed } from '../config.js';

/** `--account`'s declaration for `parseOptions`. */
export const ACCOUNT_OPTION = { account: { type: 'string' } } as const;

/**
 * The configuration of the account `requested` names (or the only one), `accountConfig`'s: its
 * settings and its Redis prefix. `needs` are checked for that account alone, so that another
 * account's missing settings do not stop a command about this one.
 */
export function loadAccountConfig(env: NodeJS.ProcessEnv, needs: ConfigNeed[], requested: string | undefined): Config {
  const declared = loadConfig(env, []);
  const { name } = findAccount(declared, requested);
  return accountConfig(needs.length > 0 ? loadConfig(env, needs, name) : declared, name);
}

/** The variable account `account` reads per-account setting `setting` from, as messages name it. */
export function accountVariable(account: string, setting: string): string {
  return account === DEFAULT_ACCOUNT ? setting : `${accountPrefix(account)}${setting}`;
}

/** ` of account NAME` where several accounts are declared; nothing where there is one. */
export function ofAccount(config: Config): string {
  return config.accounts.length > 1 ? ` of account ${config.account}` : '';
}
