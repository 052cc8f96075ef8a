import MappedCache

/// `mapped-cache migrate OLD NEW [creation options] [--json]`: copies every live entry
/// of OLD (a format-4 file, or a current one to give it another size or partitions) into
/// a new file NEW, which takes OLD's parameters except those the options name.
enum MigrateCommand {
  static func run(_ inv: Invocation) throws -> Int32 {
    let source = inv.argument("OLD")!
    let destination = inv.argument("NEW")!
    if inv.value("--type") != nil {
      throw inv.usageError("--type: the new file keeps the old one's value type")
    }
    let (given, _) = try CreationOptions.parse(inv)
    let names = Set(CreationOptions.specs.map(\.name).filter { inv.value($0) != nil })
    let report: MigrationReport
    do {
      report = try CacheFile.migrate(from: source, to: destination) { o in
        if names.contains("--capacity") { o.capacity = given.capacity }
        if names.contains("--max-key") { o.maxKeySize = given.maxKeySize }
        if names.contains("--max-value") { o.maxValueSize = given.maxValueSize }
        if names.contains("--avg-entry") { o.averageEntrySize = given.averageEntrySize }
        if names.contains("--partitions") { o.partitionCount = given.partitionCount }
        if names.contains("--max-processes") { o.maxProcesses = given.maxProcesses }
        if names.contains("--mode") { o.mode = given.mode }
      }
    } catch {
      if case .invalidArgument(let why) = error { throw CLIFailure.failed(why) }
      throw CLIFailure(error)
    }
    if inv.flag("--json") {
      Output.line(
        JSON.string([
          "source": source, "destination": destination, "source_format": report.sourceFormat,
          "copied": report.copied, "expired": report.expired, "damaged": report.damaged,
          "too_large": report.tooLarge, "entries": report.entries,
        ]))
      return ExitCode.ok
    }
    var t = TextTable(align: [.left, .right])
    t.add(["copied", Units.count(report.copied)])
    t.add(["left behind, expired", Units.count(report.expired)])
    t.add(["left behind, too large for NEW", Units.count(report.tooLarge)])
    t.add(["left behind, damaged", Units.count(report.damaged)])
    t.add(["entries in NEW", Units.count(report.entries)])
    Output.out(t.render())
    Output.line(
      "migrated \(source) (format \(report.sourceFormat)) to \(destination); "
        + "point the processes at \(destination), or move it over \(source) once they have stopped")
    return ExitCode.ok
  }
}
