import Foundation
import Glibc
@_spi(Testing) import MappedCache
import SystemCalls

// Child-process commands for ReliabilityFaultTests (issue 21, item 3): injected I/O
// errors, clocks far off, and readers holding `withBytes` buffers while others write.
// Each prints `key=value` words; a signal, a hang or a non-zero exit is a failure.
//
//   fault-seed PATH N               creates PATH (2 MiB) and stores N entries, version 1
//   fault-probe PATH N              opens PATH (never creating), counts the N entries
//          that read back whole (kept=), then sets, removes, touches, sweeps and
//          repairs (writes=ok or the error's case), and counts the entries again (after=)
//   clock-op PATH OFFSET_S OP KEY [TTL_S]   with the wall clock shifted by OFFSET_S
//          seconds: OP set (expiring in TTL_S, 0 = never) or get (found=, expired=)
//   overwrite-loop PATH KEY SIZE SECONDS   overwrites KEY with values of SIZE bytes, all
//          equal to a counter's low byte after an 8-byte counter, removing it every
//          fourth round, until SECONDS pass; prints rounds=
let faultCommands: [String: HelperCommand] = [
  "fault-seed": { a in try FaultOps.seed(path: a[0], count: Int(a[1]) ?? 100) },
  "fault-probe": { a in FaultOps.probe(path: a[0], count: Int(a[1]) ?? 100) },
  "clock-op": { a in
    FaultOps.clockOp(
      path: a[0], offsetSeconds: Int64(a[1]) ?? 0, op: a[2], key: a[3], ttl: a.count > 4 ? Double(a[4]) ?? 0 : 0)
  },
  "overwrite-loop": { a in
    try FaultOps.overwriteLoop(path: a[0], key: a[1], size: Int(a[2]) ?? 64, seconds: Double(a[3]) ?? 1)
  },
]

enum FaultOps {
  static func seed(path: String, count: Int) throws -> Int32 {
    let c = try SharedCache<[UInt8]>(path: path, capacity: 2 << 20)
    for i in 0..<count { try c.setObject(Pattern.value(index: i, version: 1, count: 100), forKey: Pattern.key(i)) }
    emit("seeded=\(count)")
    return 0
  }

  /// How many of the `count` entries read back as `version`.
  static func intact(_ c: SharedCache<[UInt8]>, count: Int, version: UInt32) -> Int {
    (0..<count).filter { i in
      (try? c.object(forKey: Pattern.key(i))) == Pattern.value(index: i, version: version, count: 100)
    }.count
  }

  static func probe(path: String, count: Int) -> Int32 {
    let c: SharedCache<[UInt8]>
    do {
      c = try SharedCache<[UInt8]>(path: path, capacity: 2 << 20, policy: OpenPolicy(create: false))
    } catch {
      emit("open=\(ReliabilityOps.errorName(error))")
      return 0
    }
    emit("open=ok kept=\(intact(c, count: count, version: 1))")
    do {
      for i in 0..<count { try c.setObject(Pattern.value(index: i, version: 2, count: 100), forKey: Pattern.key(i)) }
      try c.setObject([1], forKey: "extra", expires: .seconds(3600))
      _ = try c.touch("extra", expires: .seconds(7200))
      _ = try c.removeObject(forKey: "extra")
      _ = try c.removeExpiredObjects()
      let report = try c.verify(repair: true)
      emit("writes=ok verify=\(report.ok)")
    } catch {
      emit("writes=\(ReliabilityOps.errorName(error))")
    }
    emit("after=\(intact(c, count: count, version: 2))")
    return 0
  }

  static func clockOp(path: String, offsetSeconds: Int64, op: String, key: String, ttl: Double) -> Int32 {
    TestClock.offsetMilliseconds = offsetSeconds * 1000
    do {
      let c = try SharedCache<String>(path: path, capacity: 1 << 20, policy: OpenPolicy(create: false))
      switch op {
      case "set":
        try c.setObject("v", forKey: key, expires: ttl == 0 ? .never : .seconds(ttl))
        emit("set=ok")
      case "get":
        let found = try c.object(forKey: key) != nil
        let present = try c.object(forKey: key, allowingExpired: true) != nil
        emit("found=\(found) present=\(present)")
      default:
        emit("op=unknown")
        return 64
      }
    } catch {
      emit("error=\(ReliabilityOps.errorName(error))")
    }
    return 0
  }

  static func overwriteLoop(path: String, key: String, size: Int, seconds: Double) throws -> Int32 {
    let c = try SharedCache<[UInt8]>(path: path, capacity: 4 << 20, policy: OpenPolicy(create: false))
    let end = Date().addingTimeInterval(seconds)
    var rounds: UInt64 = 0
    while Date() < end {
      rounds += 1
      if rounds % 4 == 0 {
        _ = try c.removeObject(forKey: key)
        continue
      }
      try c.setObject(value(rounds, size: size), forKey: key)
    }
    emit("rounds=\(rounds)")
    return 0
  }

  /// An 8-byte little-endian counter, then its low byte repeated: a reader can tell a
  /// whole value from its bytes alone.
  static func value(_ n: UInt64, size: Int) -> [UInt8] {
    var v = [UInt8](repeating: UInt8(truncatingIfNeeded: n), count: size)
    for b in 0..<8 { v[b] = UInt8(truncatingIfNeeded: n >> (8 * UInt64(b))) }
    return v
  }
}
