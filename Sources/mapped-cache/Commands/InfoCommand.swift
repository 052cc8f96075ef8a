import Foundation
import Glibc
import MappedCache
import SystemCalls

/// `mapped-cache info PATH [--json]`: the fixed layout from the header.
enum InfoCommand {
  static func run(_ inv: Invocation) throws -> Int32 {
    let file = try Opening.forReading(inv)
    var i = file.info
    // The tool opens for reading only; say whether this user could write the file.
    i.writable = SystemCall.isAccessible(i.path, W_OK)
    if inv.flag("--json") {
      Output.line(JSON.string(json(i)))
      return ExitCode.ok
    }
    var t = TextTable(align: [.left, .left])
    t.add(["path", i.path])
    t.add(["format version", "\(i.formatVersion)"])
    t.add(["capacity", "\(Units.bytes(i.capacity)) (\(Units.count(i.capacity)) B)"])
    t.add(["most capacity", "\(Units.bytes(i.maxCapacity)) (mapped-cache grow; address space each process reserves)"])
    t.add(["header", "\(Units.bytes(i.headerBytes)) (process table: \(i.processSlots) entries)"])
    t.add(["partitions", "\(i.partitionCount) × \(Units.bytes(i.partitionBytes)) (a write lock, index and logs each)"])
    t.add(["index", "\(Units.count(i.slotCount)) slots now (grows and shrinks with the entries)"])
    t.add(["small log", Units.bytes(i.smallLogBytes)])
    t.add(["main log", "\(Units.bytes(i.mainLogBytes)) now"])
    t.add(["max key", Units.bytes(i.maxKeySize)])
    t.add(["max value", Units.bytes(i.maxValueSize)])
    t.add(["value type", i.valueTypeName.isEmpty ? "(untyped: any value type)" : i.valueTypeName])
    t.add(["created", "\(Units.date(i.created)) (\(Units.age(i.created)))"])
    t.add(["writable", i.writable ? "yes (by this user)" : "no (read-only for this user)"])
    Output.out(t.render())
    return ExitCode.ok
  }

  static func json(_ i: CacheFile.Info) -> [String: Any] {
    [
      "path": i.path, "format_version": i.formatVersion, "capacity_bytes": i.capacity,
      "max_capacity_bytes": i.maxCapacity,
      "header_bytes": i.headerBytes, "process_slots": i.processSlots, "partition_count": i.partitionCount,
      "partition_bytes": i.partitionBytes, "slot_count": i.slotCount,
      "small_log_bytes": i.smallLogBytes, "main_log_bytes": i.mainLogBytes,
      "max_key_bytes": i.maxKeySize, "max_value_bytes": i.maxValueSize,
      "value_type": i.valueTypeName, "created": Units.date(i.created),
      "created_ms": Int((i.created.timeIntervalSince1970 * 1000).rounded()), "writable": i.writable,
    ]
  }
}
