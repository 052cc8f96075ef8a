import MappedCache

/// The options that say what cache to make: `create` takes them all, and `set` takes
/// them too, to make the file when PATH is missing or an unfinished creation (a process
/// killed while creating it left it empty or marked "MCCINIT0"), as
/// `SharedCache(path:options:)` does with the options it is given.
enum CreationOptions {
  static let specs: [OptionSpec] = [
    OptionSpec(
      name: "--capacity", value: "SIZE", defaultValue: "64MiB",
      help:
        "File size, 1MiB to 64TiB (K or KiB, M or MiB, G or GiB, T or TiB: powers of 1024; KB, MB, GB, TB are refused as ambiguous)."
    ),
    OptionSpec(name: "--max-key", value: "B", defaultValue: "250", help: "Longest key in bytes, 1 to 4096."),
    OptionSpec(
      name: "--max-value", value: "SIZE", defaultValue: "1MiB",
      help: "Largest value (lowered when the cache is too small to hold it)."),
    OptionSpec(
      name: "--avg-entry", value: "SIZE", defaultValue: "320",
      help: "Expected key+value size: a hint for the index's first size (it then follows the entries)."),
    OptionSpec(
      name: "--partitions", value: "N", defaultValue: "automatic",
      help:
        "Partitions, each with its own write lock, index and logs (1 to 1048576); more let more writers run at once, fewer hold larger values."
    ),
    OptionSpec(
      name: "--max-capacity", value: "SIZE", defaultValue: "64 × capacity, at most 1TiB",
      help: "The most the file may grow to (mapped-cache grow): address space every process reserves, not memory."),
    OptionSpec(
      name: "--max-processes", value: "N", defaultValue: "8192 from 32MiB, 256 below",
      help:
        "Most processes writing the file at once, 1 to 16383 (one entry each, shared by its handles; over 1000 needs this version or later)."
    ),
    OptionSpec(
      name: "--mode", value: "MODE", defaultValue: "0600",
      help: "Permission bits (octal), before the umask; with create --group: exactly, 0660 unless given."),
    OptionSpec(
      name: "--type", value: "NAME",
      help: "Value type to record (bytes, string, int64, ...); default untyped."),
  ]

  /// Whether the command line names any creation option.
  static func given(_ inv: Invocation) -> Bool { specs.contains { inv.value($0.name) != nil } }

  /// The cache options and the value type name the command line asks for.
  static func parse(_ inv: Invocation) throws(CLIFailure) -> (options: CacheOptions, typeName: String) {
    var o = CacheOptions()
    if let c = try inv.size("--capacity") { o.capacity = c }
    if let k = try inv.integer("--max-key", in: 1...4096) { o.maxKeySize = k }
    if let v = try inv.size("--max-value") { o.maxValueSize = v }
    if let a = try inv.size("--avg-entry") { o.averageEntrySize = a }
    if let p = try inv.integer("--partitions", in: 1...(1 << 20)) { o.partitionCount = p }
    if let m = try inv.size("--max-capacity") { o.maxCapacity = m }
    if let n = try inv.integer("--max-processes", in: 1...16383) { o.maxProcesses = n }
    if let m = try inv.mode("--mode") { o.mode = m }
    let typeName = inv.value("--type") ?? ""
    if typeName.utf8.count > 100 { throw inv.usageError("--type must be at most 100 bytes") }
    return (o, typeName)
  }
}
