import Glibc
import SystemCalls

// mapped-cache: the command-line tool for MappedCache files. See `Tool` for dispatch,
// `CommandTable` for the commands, `Commands/` for each command.

// A closed pipe must end the tool with a message and exit 3, never by SIGPIPE.
SystemCall.ignoreSignal(SIGPIPE)
Signals.installBusErrorHandler()

let status = Tool.run(Array(CommandLine.arguments.dropFirst()))
Output.flush()
SystemCall.exit(status)
