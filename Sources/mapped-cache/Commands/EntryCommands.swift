import Glibc
import MappedCache
import SystemCalls

/// `get`, `set` and `delete`: one key each.
enum EntryCommands {
  /// `mapped-cache get PATH KEY`: the value as it was given (`ValueText`) to stdout; exit 1
  /// when missing.
  static func get(_ inv: Invocation) throws -> Int32 {
    let key = try Opening.key(inv)
    let file = try Opening.forReading(inv)
    guard let (value, _) = try file.get(key) else {
      throw CLIFailure.notFound("key not found: \(Units.printable(key))")
    }
    Output.bytes(try ValueText.shown(value, type: file.valueTypeName))
    return ExitCode.ok
  }

  /// `mapped-cache set PATH KEY [VALUE|-] [--ttl SECONDS] [creation options]`
  static func set(_ inv: Invocation) throws -> Int32 {
    let key = try Opening.key(inv)
    let ttl = try inv.seconds("--ttl", allowZero: true)
    let given = inv.argument("VALUE|-")
    if given == nil && SystemCall.isTerminal(0) {
      throw inv.usageError("missing VALUE (give it, or - to read standard input)")
    }
    let file: CacheFile
    if CreationOptions.given(inv) {
      let (options, typeName) = try CreationOptions.parse(inv)
      file = try Opening.forWriting(inv, creating: options, typeName: typeName)
    } else {
      file = try Opening.forWriting(inv)
    }
    if !file.isWritable { throw CLIFailure.failed("\(file.path) is not writable by this user") }
    let value: [UInt8]
    if let given, given != "-" {
      value = Array(given.utf8)
    } else {
      value = try readStandardInput(limit: file.info.maxValueSize)
    }
    try file.set(key, try ValueText.stored(value, type: file.valueTypeName), ttl: ttl == 0 ? nil : ttl)
    return ExitCode.ok
  }

  /// `mapped-cache delete PATH KEY`: exit 1 when missing.
  static func delete(_ inv: Invocation) throws -> Int32 {
    let key = try Opening.key(inv)
    let file = try Opening.forWriting(inv)
    guard try file.delete(key) else { throw CLIFailure.notFound("key not found: \(Units.printable(key))") }
    return ExitCode.ok
  }

  /// Reads stdin to its end, but no more than `limit` + 1 bytes: a longer value is
  /// refused without reading the rest.
  static func readStandardInput(limit: Int) throws -> [UInt8] {
    var out: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 1 << 16)
    while out.count <= limit {
      let want = min(chunk.count, limit + 1 - out.count)
      let got = chunk.withUnsafeMutableBytes { b in
        Result { () throws(SystemError) in
          try SystemCall.read(0, into: UnsafeMutableRawBufferPointer(rebasing: b[..<want]))
        }
      }
      let n: Int
      switch got {
      case .success(let count): n = count
      case .failure(let e) where e.code == .wouldBlock: continue
      case .failure(let e): throw CLIFailure.failed("cannot read standard input: \(e.code.message)")
      }
      if n == 0 { return out }
      out.append(contentsOf: chunk[0..<n])
    }
    throw CLIFailure.failed("the value on standard input is longer than the cache's limit of \(limit) bytes")
  }
}
