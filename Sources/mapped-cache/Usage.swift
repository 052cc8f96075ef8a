/// Help and usage texts, generated from `CommandTable`.
enum Usage {
  static let tool = "mapped-cache"

  /// One line: "mapped-cache stats PATH [--json] [--watch SECONDS] ...".
  static func line(for c: CommandSpec) -> String {
    var parts = [tool, c.name]
    for a in c.arguments { parts.append(a.optional ? "[\(a.name)]" : a.name) }
    for o in c.options { parts.append(o.value.map { "[\(o.name) \($0)]" } ?? "[\(o.name)]") }
    return parts.joined(separator: " ")
  }

  static var toolLine: String { "\(tool) COMMAND PATH [ARGUMENTS] [OPTIONS]" }

  /// `mapped-cache COMMAND --help`.
  static func help(for c: CommandSpec) -> String {
    var s = "OVERVIEW: \(c.summary)\n\nUSAGE: \(line(for: c))\n"
    if !c.arguments.isEmpty {
      s += "\nARGUMENTS:\n"
      for a in c.arguments { s += row(a.name, a.help) }
    }
    s += "\nOPTIONS:\n"
    for o in c.options {
      let left = o.value.map { "\(o.name) \($0)" } ?? o.name
      s += row(left, o.help + (o.defaultValue.map { " (default: \($0))" } ?? ""))
    }
    s += row("-h, --help", "Show help information.")
    if let d = c.discussion { s += "\n" + d + "\n" }
    return s
  }

  /// `mapped-cache --help`.
  static var toolHelp: String {
    var s = """
      OVERVIEW: Create, inspect, verify and edit MappedCache files, also while other
      processes use them (reads take no lock; each write holds the lock for one operation).

      USAGE: \(toolLine)

      COMMANDS:

      """
    for c in CommandTable.commands { s += row(c.name, c.summary) }
    s += "\nOPTIONS:\n"
    s += row("-h, --help", "Show help information (also after a command).")
    s += row("--version", "Show the tool's and the file format's versions.")
    s += """

      EXIT CODES:
        0   success
        1   key not found (get, delete)
        2   the file is not a valid or compatible cache, or verify found a problem
        3   any other failure (permissions, I/O, limits), with a message
        64  usage error

      A file whose creation never finished (a process killed while creating it left it
      empty or marked "MCCINIT0") holds no entries: every command reports it as an
      unfinished creation (exit 2) and leaves it alone, except create and set with
      creation options (--capacity, ...), which lay it out with their options.

      Put -- before a KEY or VALUE that starts with a dash.
      See '\(tool) COMMAND --help' for a command's arguments and options.

      """
    return s
  }

  private static func row(_ left: String, _ right: String) -> String {
    let pad = 24
    let l = "  " + left
    return l.count + 2 <= pad
      ? l.padding(toLength: pad, withPad: " ", startingAt: 0) + right + "\n"
      : l + "\n" + String(repeating: " ", count: pad) + right + "\n"
  }
}
