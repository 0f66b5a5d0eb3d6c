/**
 * Bad command lines and bad configuration (invariant 9): each case is argv plus environment changes
 * and the exit code and message it must produce. Exit 2 for bad usage or configuration, naming each
 * bad value; 1 for a failure while working, in one line.
 */

export interface CliCase {
  name: string;
  args: string[];
  /** Changes to the base environment; undefined removes a variable. */
  env?: Record<string, string | undefined>;
  code: number;
  /** Each must match the output: stderr for a non-zero exit unless `stream` says otherwise. */
  messages: RegExp[];
  stream?: 'stdout' | 'stderr';
}

const worker = ['start', '--role', 'worker'];

export function buildCliCorpus(options: { dbPassword: string }): CliCase[] {
  const env = (name: string, value: string | undefined, message: RegExp): CliCase => ({
    name: `${name}=${JSON.stringify(value)}`,
    args: worker,
    env: { [name]: value },
    code: 2,
    messages: [message],
  });
  return [
    // Commands.
    // Without a command: a usage error on stderr, exit code 2 (`help` prints usage on stdout, exit 0).
    { name: 'no command', args: [], code: 2, messages: [/no command given/, /usage: subscriber-mirror <command>/] },
    { name: 'unknown command', args: ['frobnicate'], code: 2, messages: [/unknown command "frobnicate"/, /usage: subscriber-mirror/] },
    { name: 'command in capitals', args: ['START'], code: 2, messages: [/unknown command "START"/] },
    { name: 'empty command (same as none)', args: [''], code: 2, messages: [/no command given/, /usage: subscriber-mirror <command>/] },
    { name: '--version is no command', args: ['--version'], code: 2, messages: [/unknown command "--version"/] },
    { name: 'help (control: exit 0)', args: ['help'], code: 0, messages: [/usage: subscriber-mirror/] },
    // Flags.
    {
      name: 'unknown role',
      args: ['start', '--role', 'janitor'],
      code: 2,
      messages: [/--role must be one of all, worker, receiver, got "janitor"/],
    },
    { name: 'misspelt flag', args: ['start', '--rol', 'all'], code: 2, messages: [/Unknown option '--rol'/] },
    { name: 'flag without its value', args: ['start', '--role'], code: 2, messages: [/--role/] },
    { name: 'migrate with an unknown flag', args: ['migrate', '--nope'], code: 2, messages: [/Unknown option '--nope'/] },
    { name: 'boolean flag given a value', args: ['status', '--json=yes'], code: 2, messages: [/--json/] },
    { name: 'unexpected argument', args: ['status', 'extra'], code: 2, messages: [/extra/] },
    { name: 'backfill without a group', args: ['backfill'], code: 2, messages: [/backfill needs --group ID/] },
    {
      name: 'backfill of a non-numeric group',
      args: ['backfill', '--group', 'abc'],
      code: 2,
      messages: [/--group must be a numeric group id, got "abc"/],
    },
    {
      name: 'backfill of a negative group',
      args: ['backfill', '--group=-1'],
      code: 2,
      messages: [/--group must be a numeric group id, got "-1"/],
    },
    {
      name: 'backfill with --group and --all',
      args: ['backfill', '--group', '1', '--all'],
      code: 2,
      messages: [/either --group ID or --all/],
    },
    {
      name: 'backfill of an unknown type',
      args: ['backfill', '--group', '1', '--type', 'vip'],
      code: 2,
      messages: [/--type must be one of/],
    },
    {
      name: 'replay of an unknown status',
      args: ['webhooks', 'replay', '--status', 'nope'],
      code: 2,
      messages: [/--status must be failed or ignored, got "nope"/],
    },
    { name: 'replay since a word', args: ['webhooks', 'replay', '--since', 'yesterday'], code: 2, messages: [/--since must be a date/] },
    {
      name: 'unknown webhooks subcommand',
      args: ['webhooks', 'frobnicate'],
      code: 2,
      messages: [/unknown webhooks subcommand "frobnicate"/],
    },
    { name: 'webhooks without a subcommand', args: ['webhooks'], code: 2, messages: [/webhooks needs a subcommand/] },
    { name: 'register without --url', args: ['webhooks', 'register'], code: 2, messages: [/webhooks register needs --url/] },
    {
      name: 'register with an ftp URL',
      args: ['webhooks', 'register', '--url', 'ftp://example.com/hook'],
      code: 2,
      messages: [/--url must be an http\(s\) URL/],
    },
    { name: 'get of an id with a slash', args: ['webhooks', 'get', '../1'], code: 2, messages: [/"\.\.\/1" is not a webhook id/] },
    { name: 'delete without an id', args: ['webhooks', 'delete'], code: 2, messages: [/webhooks delete needs a webhook ID/] },
    { name: 'update with nothing to change', args: ['webhooks', 'update', '123'], code: 2, messages: [/nothing to change/] },
    {
      name: 'update with an unknown kind',
      args: ['webhooks', 'update', '123', '--events', 'subscriber.exploded'],
      code: 2,
      messages: [/unknown event kind "subscriber.exploded"/],
    },
    // Environment.
    env('SYNC_EVERY', 'often', /SYNC_EVERY: "often" is not a duration/),
    env('SYNC_EVERY', '500ms', /SYNC_EVERY: "500ms" is shorter than 1s/),
    env('SYNC_LOOKBACK', '-1d', /SYNC_LOOKBACK: "-1d" is not a duration/),
    env('RECONCILE_EVERY', '10', /RECONCILE_EVERY: "10" is not a duration/),
    env('SYNC_PAGE_SIZE', '0', /SYNC_PAGE_SIZE: 0 is outside 1\.\.10000/),
    env('SYNC_PAGE_SIZE', '10001', /SYNC_PAGE_SIZE: 10001 is outside 1\.\.10000/),
    env('SYNC_PAGE_SIZE', '1.5', /SYNC_PAGE_SIZE: "1\.5" is not a whole number/),
    env('API_RATE_LIMIT', '-5', /API_RATE_LIMIT: "-5" is not a whole number/),
    env('API_RATE_LIMIT', '100001', /API_RATE_LIMIT: 100001 is outside 1\.\.100000/),
    env('PORT', 'eighty', /PORT: "eighty" is not a whole number/),
    env('PORT', '70000', /PORT: 70000 is outside 0\.\.65535/),
    env('LOG_LEVEL', 'verbose', /LOG_LEVEL:/),
    env('REDIS_PREFIX', 'bad prefix!', /REDIS_PREFIX: must be 1-64 letters/),
    env('DATABASE_URL', `mysql://root:${options.dbPassword}@127.0.0.1/db`, /DATABASE_URL: must be a URL like postgres:/),
    env('DATABASE_URL', 'not a url', /DATABASE_URL: must be a URL like postgres:/),
    env('REDIS_URL', 'http://127.0.0.1:6379', /REDIS_URL: must be a URL like redis:/),
    env('MAILER_LEGACY_URL', 'ftp://example.com', /MAILER_LEGACY_URL: must be an http\(s\) URL/),
    env('MAILER_SOURCE_TZ', 'Mars/Olympus_Mons', /MAILER_SOURCE_TZ: must be an IANA timezone/),
    env('SYNC_TYPES', 'active,vip', /SYNC_TYPES: unknown type "vip"/),
    env('SYNC_GROUPS', 'abc,12', /SYNC_GROUPS: group ids must be numeric, got "abc"/),
    env('WEBHOOK_PATH', 'webhooks', /WEBHOOK_PATH: must be a path starting with \//),
    env('ADMIN_TOKEN', 'short', /ADMIN_TOKEN: must be at least 16 characters/),
    env('WEBHOOK_MAX_BODY', '10', /WEBHOOK_MAX_BODY: 10 is outside/),
    env('SHUTDOWN_TIMEOUT', 'forever', /SHUTDOWN_TIMEOUT: "forever" is not a duration/),
    env('MAILER_API_KEY_HEADER', 'X Key', /MAILER_API_KEY_HEADER: must be an HTTP header name/),
    {
      name: 'worker without key and groups',
      args: worker,
      env: { MAILER_API_KEY: undefined, SYNC_GROUPS: undefined },
      code: 2,
      messages: [/MAILER_API_KEY: required for polling/, /SYNC_GROUPS: required for polling/],
    },
    {
      name: 'six bad values at once: one message naming each',
      args: worker,
      env: { SYNC_EVERY: 'often', PORT: 'eighty', LOG_LEVEL: 'loud', SYNC_TYPES: 'vip', REDIS_URL: 'nope', SYNC_PAGE_SIZE: '-1' },
      code: 2,
      messages: [/SYNC_EVERY:/, /PORT:/, /LOG_LEVEL:/, /SYNC_TYPES:/, /REDIS_URL:/, /SYNC_PAGE_SIZE:/],
    },
    // Failures while working: exit 1, one line, no password.
    {
      name: 'start against an unreachable database',
      args: ['start', '--role', 'receiver'],
      env: { DATABASE_URL: `postgres://postgres:${options.dbPassword}@127.0.0.1:1/nowhere` },
      code: 1,
      messages: [/^subscriber-mirror: cannot migrate the database: .*ECONNREFUSED/],
    },
    {
      name: 'get of a webhook the service does not have',
      args: ['webhooks', 'get', 'abc'],
      code: 1,
      messages: [/^subscriber-mirror: webhook abc does not exist$/m],
    },
    {
      name: 'status against an unreachable database',
      args: ['status'],
      env: { DATABASE_URL: `postgres://postgres:${options.dbPassword}@127.0.0.1:1/nowhere` },
      code: 1,
      messages: [/^subscriber-mirror: cannot read status: .*ECONNREFUSED/],
    },
  ];
}
