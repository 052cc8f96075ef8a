import MappedCache

/// The tool's exit codes (documented in `mapped-cache --help`).
enum ExitCode {
  static let ok: Int32 = 0
  /// `get` or `delete` found no such key.
  static let notFound: Int32 = 1
  /// The file is not a valid or compatible cache, or `verify` found a problem.
  static let invalidCache: Int32 = 2
  /// Any other failure (permissions, I/O, limits), with a message.
  static let failure: Int32 = 3
  /// Bad command line: `error: ...` plus the usage line on stderr (sysexits' EX_USAGE).
  static let usage: Int32 = 64
}

/// Why a command stopped. Commands throw these; `Tool.run` prints the message and
/// turns the case into an exit code, in one place.
enum CLIFailure: Error {
  /// A bad command line. `command` is the command whose usage line is printed (nil:
  /// the tool's).
  case usage(String, command: CommandSpec?)
  /// No such key (exit 1).
  case notFound(String)
  /// Not a valid or compatible cache, or verify found problems (exit 2). An empty
  /// message prints nothing (the command already reported).
  case invalidCache(String)
  /// Anything else (exit 3).
  case failed(String)

  var exitCode: Int32 {
    switch self {
    case .usage: return ExitCode.usage
    case .notFound: return ExitCode.notFound
    case .invalidCache: return ExitCode.invalidCache
    case .failed: return ExitCode.failure
    }
  }

  /// Maps a library error to the tool's exit codes: 2 for files that are not valid or
  /// compatible caches, 3 for everything else (permissions, I/O, limits, full disk).
  init(_ e: CacheError) {
    switch e {
    case .notACacheFile, .incompatibleFormat, .corrupted, .typeMismatch:
      self = .invalidCache(e.description)
    case .emptyKey:
      self = .usage("KEY must not be empty", command: nil)
    default:
      self = .failed(e.description)
    }
  }

  /// Any error a command let through.
  init(any error: Error) {
    if let f = error as? CLIFailure {
      self = f
      return
    }
    if let c = error as? CacheError {
      self.init(c)
      return
    }
    if let s = error as? SystemError {
      self = .failed(s.description)
      return
    }
    self = .failed("\(error)")
  }
}
