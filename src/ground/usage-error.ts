/**
 * Bad command-line usage, for every command (the service's CLI, its subcommands, the simulator): the
 * CLI exits 2 with the message (docs/architecture.md, invariant 9).
 */
export class UsageError extends Error {
  override readonly name = 'UsageError';
  /**
   * Whether the CLI prints its usage after the message; false when the message explains the options
   * of the subcommand at fault itself, or needs nothing more.
   */
  readonly printUsage: boolean;

  constructor(message: string, options: { printUsage?: boolean } = {}) {
    super(message);
    this.printUsage = options.printUsage ?? true;
  }
}
