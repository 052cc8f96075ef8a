import CacheTools

/// One table describes every command: its arguments, its options (flag, value name,
/// default, help) and the function that runs it. The parser (`Invocation.parse`) and
/// the help and usage texts (`Usage`) are both driven by it, so they cannot disagree.

struct ArgumentSpec: Sendable {
  var name: String
  var optional = false
  var help: String
}

struct OptionSpec: Sendable {
  /// Long form, with dashes: "--watch".
  var name: String
  /// Value name for options that take one ("SECONDS"); nil for a flag.
  var value: String? = nil
  /// Shown as "(default: ...)".
  var defaultValue: String? = nil
  var help: String
}

struct CommandSpec: Sendable {
  var name: String
  var summary: String
  var arguments: [ArgumentSpec]
  var options: [OptionSpec] = []
  /// More help text, printed after the options.
  var discussion: String? = nil
  var run: @Sendable (Invocation) throws -> Int32
}

enum CommandTable {
  static let path = ArgumentSpec(name: "PATH", help: "The cache file.")
  static let key = ArgumentSpec(name: "KEY", help: "The key, as given (its UTF-8 bytes).")
  static let json = OptionSpec(name: "--json", help: "Print JSON (stable key order) instead of a table.")

  static let commands: [CommandSpec] = [
    CommandSpec(
      name: "create", summary: "Create a cache file.",
      arguments: [path],
      options: CreationOptions.specs + [
        OptionSpec(
          name: "--group", value: "NAME",
          help: "Give the file to group NAME, to share it between users of that group (you must be a member, or root).")
      ],
      discussion: """
        Fails (exit 3) when PATH already exists and is not empty, unless it is an
        unfinished creation (a process killed while creating it left it marked
        "MCCINIT0"): that one is created afresh with these options, as
        SharedCache(path:options:) would do. An empty file is created in place too.

        To share a cache between users, put them in one group and create the file with
        --group NAME (mode 0660 by default then): processes open it with
        OpenPolicy.sharedWithGroup("NAME"), and this tool's writing commands accept a
        file of any group you belong to. Files that others may write are always refused.
        """,
      run: CreateCommand.run),
    CommandSpec(
      name: "info", summary: "Show the file's layout: format version, capacity, slots, limits, value type, created.",
      arguments: [path], options: [json], run: InfoCommand.run),
    CommandSpec(
      name: "stats", summary: "Show counters: entries, bytes, fill, hits, misses, evictions, probe lengths, ...",
      arguments: [path],
      options: [
        json,
        OptionSpec(
          name: "--watch", value: "SECONDS",
          help: "Refresh every SECONDS with rates per second, until interrupted."),
        OptionSpec(name: "--count", value: "N", help: "With --watch: stop after N refreshes."),
        OptionSpec(name: "--prometheus", help: "Print the Prometheus text exposition format."),
        OptionSpec(
          name: "--serve", value: "ADDRESS",
          help: "Serve --prometheus at http://ADDRESS/metrics until interrupted (HOST:PORT, [IPV6]:PORT, :PORT)."),
      ],
      discussion: """
        Counters are summed over every process that has used the file, and over every
        partition. The index figures (load, second place, groups) are read without the
        locks. Second place is the share of entries in their key's second bucket (a read
        that misses the first looks there too).

        With --serve, each scrape of /metrics reads the figures afresh, lock-free; / shows
        a short page. Only GET and HEAD are served. :PORT means 127.0.0.1 (loopback);
        listen on 0.0.0.0:PORT or [::]:PORT to let other hosts scrape (there is no TLS or
        authentication: keep it behind a firewall or a proxy). Port 0 picks a free port,
        printed on the first line. SIGINT and SIGTERM stop it (exit 0).
        """,
      run: StatsCommand.run),
    CommandSpec(
      name: "agent", summary: "Hold a Redis near cache's invalidation role for this host (a sidecar).",
      arguments: [path],
      options: [
        OptionSpec(name: "--redis", value: "URL", help: "redis://[user:pass@]host:port/db or unix:///path/redis.sock."),
        OptionSpec(
          name: "--prefix", value: "P", defaultValue: "\"\"", help: "The RedisCache's key prefix (tracked with BCAST)."),
        OptionSpec(name: "--max-staleness", value: "SECONDS", defaultValue: "0.5", help: "Shown in the figures."),
        OptionSpec(
          name: "--heartbeat", value: "SECONDS", defaultValue: "0.02", help: "Interval of the confirmed PINGs."),
        OptionSpec(name: "--capacity", value: "SIZE", defaultValue: "64MiB", help: "File size when it is created."),
      ],
      discussion: """
        Runs until SIGINT or SIGTERM. Stands for the role like every NearCache of the file:
        one of them holds it at a time (a kernel lock on PATH.holder), and another takes
        it within milliseconds when the holder dies.
        """,
      run: AgentCommand.run),
    CommandSpec(
      name: "get",
      summary:
        "Write the value to standard output as it was given, by the file's value type (an int64 in decimal, a Python value without its type tag); exit 1 when missing.",
      arguments: [path, key], run: EntryCommands.get),
    CommandSpec(
      name: "set",
      summary:
        "Store a value, from the argument or from standard input with -, as the file's value type reads it (an int64 from decimal, text as a Python str).",
      arguments: [
        path, key,
        ArgumentSpec(
          name: "VALUE|-", optional: true,
          help: "The value; - (or nothing, when stdin is not a terminal) reads standard input."),
      ],
      options: [
        OptionSpec(
          name: "--ttl", value: "SECONDS",
          help: "Expire after SECONDS (units ms, s, m, h, d; 0 = never).")
      ] + CreationOptions.specs,
      discussion: """
        Creation options (--capacity, --max-key, --max-value, --avg-entry, --mode, --type)
        make PATH a cache first when it is missing or an unfinished creation (empty, or
        left marked by a process killed while creating it); an existing cache keeps its
        own parameters. Without them, set (like every command but create) refuses an
        unfinished creation with exit 2 and says so: which capacity its creator meant is
        unknown, so it is left for create, set with creation options, or
        SharedCache(path:) to lay out.
        """,
      run: EntryCommands.set),
    CommandSpec(
      name: "delete", summary: "Remove a key (exit 1 when missing).",
      arguments: [path, key], run: EntryCommands.delete),
    CommandSpec(
      name: "keys", summary: "List keys with each entry's size and remaining TTL.",
      arguments: [path],
      options: [
        OptionSpec(name: "--prefix", value: "P", help: "Only keys starting with P."),
        OptionSpec(name: "--limit", value: "N", help: "At most N keys."),
        json,
      ],
      discussion:
        "Keys are listed in index order without locking: entries changed during the scan may be missed or seen twice.",
      run: ListingCommands.keys),
    CommandSpec(
      name: "dump", summary: "List every live entry: key, size, expiry, version; values with --values.",
      arguments: [path],
      options: [
        json,
        OptionSpec(name: "--values", help: "Include values (in JSON: \"value\" when UTF-8, else \"value_base64\")."),
        OptionSpec(name: "--prefix", value: "P", help: "Only keys starting with P."),
        OptionSpec(name: "--limit", value: "N", help: "At most N entries."),
      ],
      run: ListingCommands.dump),
    CommandSpec(
      name: "verify", summary: "Check every invariant (exit 2 on a problem).",
      arguments: [path],
      options: [
        OptionSpec(
          name: "--repair", help: "Fix what can be fixed, under the write lock (exit 0 when the file is then sound)."),
        json,
      ],
      discussion: """
        Checks the whole file first without the write lock, so writers go on. Only if that
        pass finds something (a write landing mid-scan can look like damage) does it take the
        write lock for a second, exact pass (and the repair, with --repair), and report what
        that pass found: a busy cache is reported as damaged only when it is. On a file this
        user cannot write, there is no lock to take and the first pass is the report.
        """,
      run: MaintenanceCommands.verify),
    CommandSpec(
      name: "migrate",
      summary: "Copy every live entry into a new file (from format 4, or to change size or partitions).",
      arguments: [
        ArgumentSpec(name: "OLD", help: "The cache file to copy from (only read)."),
        ArgumentSpec(name: "NEW", help: "The file to create (must not exist)."),
      ],
      options: CreationOptions.specs.filter { $0.name != "--type" } + [json],
      discussion: """
        NEW takes OLD's capacity, key and value limits, process count, permission bits
        and value type, and the partitions this machine would choose; the creation
        options change any of them. OLD is mapped read-only and never changed: stop its
        writers first, or what they write meanwhile may be missed. Entries that have
        expired, that are too large for NEW, or that fail their checks are left behind
        and counted. When NEW is smaller than what OLD holds, copying evicts as sets do.
        Then point the processes at NEW, or rename NEW over OLD once they have stopped
        (a process that still has OLD open keeps using OLD).
        """,
      run: MigrateCommand.run),
    CommandSpec(
      name: "sweep", summary: "Remove expired entries now.",
      arguments: [path], run: MaintenanceCommands.sweep),
    CommandSpec(
      name: "clear", summary: "Remove every entry.",
      arguments: [path], run: MaintenanceCommands.clear),
    CommandSpec(
      name: "grow", summary: "Grow the file while other processes keep using it.",
      arguments: [path],
      options: [
        OptionSpec(
          name: "--capacity", value: "SIZE", help: "The new size (e.g. 256MiB), at most the file's most capacity."),
        OptionSpec(
          name: "--policy", value: "SPEC",
          help:
            "Store a growth policy: RATE[:FACTOR[:SECONDS[:INSERTS]]] (grow by FACTOR, 2, when ghost hits reach RATE of new keys, at most every SECONDS, 60, after INSERTS, 10000, new keys), or off."
        ),
        json,
      ],
      discussion: """
        Adds whole partitions at the end of the file, each filled from the partition it
        splits, while every process goes on reading and writing through its open handle.
        Nothing stored is lost, and no process has to reopen. The most a file may grow to
        is fixed when it is created (create --max-capacity, shown by info). With --policy
        the file grows by itself, from any process's writes, when it keeps evicting keys
        that come back (stats shows the ghost hits and the growths).
        """,
      run: MaintenanceCommands.grow),
  ]

  static func command(named name: String) -> CommandSpec? { commands.first { $0.name == name } }
}

/// A parsed command line for one command.
struct Invocation {
  let command: CommandSpec
  var arguments: [String: String] = [:]
  var values: [String: String] = [:]
  var flags: Set<String> = []

  /// Parses `args` (after the command name) against `command`'s table. Options may come
  /// anywhere, as `--name value` or `--name=value`; `--` ends them (for keys starting
  /// with a dash); a lone `-` is an argument. Returns nil when help was asked for.
  static func parse(_ args: [String], for command: CommandSpec) throws(CLIFailure) -> Invocation? {
    var inv = Invocation(command: command)
    var positional: [String] = []
    var i = 0
    var optionsEnded = false
    func usage(_ m: String) -> CLIFailure { .usage(m, command: command) }
    while i < args.count {
      let a = args[i]
      i += 1
      if optionsEnded || a == "-" || !a.hasPrefix("-") {
        positional.append(a)
        continue
      }
      if a == "--" {
        optionsEnded = true
        continue
      }
      if a == "-h" || a == "--help" { return nil }
      var name = a
      var inline: String? = nil
      if let eq = a.firstIndex(of: "=") {
        name = String(a[..<eq])
        inline = String(a[a.index(after: eq)...])
      }
      guard let spec = command.options.first(where: { $0.name == name }) else {
        throw usage("unknown option '\(name)' for '\(command.name)'")
      }
      if spec.value == nil {
        if inline != nil { throw usage("\(name) takes no value") }
        inv.flags.insert(name)
      } else if let inline {
        inv.values[name] = inline
      } else {
        guard i < args.count else { throw usage("\(name) needs a value (\(spec.value!))") }
        inv.values[name] = args[i]
        i += 1
      }
    }
    let required = command.arguments.filter { !$0.optional }.count
    if positional.count < required {
      let missing = command.arguments[positional.count]
      throw usage("missing \(missing.name)")
    }
    if positional.count > command.arguments.count {
      throw usage("unexpected argument '\(positional[command.arguments.count])'")
    }
    for (spec, value) in zip(command.arguments, positional) { inv.arguments[spec.name] = value }
    return inv
  }

  func argument(_ name: String) -> String? { arguments[name] }
  func flag(_ name: String) -> Bool { flags.contains(name) }
  func value(_ name: String) -> String? { values[name] }

  func usageError(_ message: String) -> CLIFailure { .usage(message, command: command) }

  /// A whole number within `range`.
  func integer(_ name: String, in range: ClosedRange<Int>) throws(CLIFailure) -> Int? {
    guard let s = values[name] else { return nil }
    guard let n = Int(s), range.contains(n) else {
      throw usageError("\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound), not '\(s)'")
    }
    return n
  }

  /// A size in bytes (`ByteSize`: 4096, 512K, 64MiB, 1.5G; powers of 1024, KB/MB/GB refused).
  func size(_ name: String) throws(CLIFailure) -> Int? {
    guard let s = values[name] else { return nil }
    do {
      return try ByteSize.parse(s)
    } catch {
      throw usageError("\(name): \(error)")
    }
  }

  /// A duration in seconds (`DurationText`: 30, 1.5, 250ms, 10m, 2h, 1d).
  func seconds(_ name: String, allowZero: Bool) throws(CLIFailure) -> Double? {
    guard let s = values[name] else { return nil }
    let d: Double
    do {
      d = try DurationText.parse(s)
    } catch {
      throw usageError("\(name): \(error)")
    }
    guard allowZero ? d >= 0 : d > 0 else { throw usageError("\(name) must be more than 0 seconds, not '\(s)'") }
    return d
  }

  /// Permission bits in octal.
  func mode(_ name: String) throws(CLIFailure) -> UInt32? {
    guard let s = values[name] else { return nil }
    let digits = s.hasPrefix("0o") ? String(s.dropFirst(2)) : s
    guard !digits.isEmpty, let m = UInt32(digits, radix: 8), m <= 0o777 else {
      throw usageError("\(name) must be octal permission bits like 0600, not '\(s)'")
    }
    return m
  }
}
