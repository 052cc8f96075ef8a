// libFuzzer target (f): the cluster holder's `CLUSTER NODES` parser
// (`Sources/MappedCacheRedis/ClusterMigrations.swift`, compiled into this target with the
// slot and RESP files it needs) on an arbitrary reply text. Built by
// scripts/fuzz-guided.sh; see docs/fuzzing.md.
//
// Oracle: parsing never traps, whatever the bytes; it throws only `protocolViolation`;
// what it accepts keeps its promises (the answering node's id is 40 hex digits, every
// marker's slot is a slot and its peer an id, no more markers than slots, no more
// addresses than lines; every line's id and primary are ids, its ranges ordered slots,
// no more ranges than slots, exactly one line flagged myself); the same text as a bulk
// string or a verbatim string parses the same; and the bookkeeping built from a report
// never traps either.
import MappedCache

let from = ClusterNode(host: "10.0.0.1", port: 7000)

func isID(_ s: String) -> Bool {
  s.utf8.count == 40 && s.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
}

func parse(_ v: RESPValue) -> Result<ClusterNodesReport, CacheError> {
  do { return .success(try ClusterNodesReport.parse(v, from: from)) } catch let e as CacheError {
    return .failure(e)
  } catch {
    fatalError("an error that is not a CacheError: \(error)")
  }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
  let bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
  let bulk = parse(.bulkString(bytes))
  let verbatim = parse(.verbatim(format: "txt", text: bytes))
  switch (bulk, verbatim) {
  case (.success(let a), .success(let b)):
    guard a == b else { fatalError("bulk and verbatim parse differently: \(a) against \(b)") }
    guard isID(a.myID) else { fatalError("an id that is not 40 hex digits: \(a.myID)") }
    for m in a.migrating + a.importing {
      guard (0..<ClusterSlots.count).contains(m.slot), isID(m.peer) else { fatalError("a bad marker: \(m)") }
    }
    guard a.migrating.count + a.importing.count <= ClusterSlots.count else { fatalError("more markers than slots") }
    let lines = bytes.split(omittingEmptySubsequences: true) { $0 == 10 || $0 == 13 }.count
    guard a.addresses.count <= lines else { fatalError("more addresses than lines") }
    guard a.lines.count <= lines, a.lines.filter({ $0.flags.contains("myself") }).count == 1 else {
      fatalError("lines: \(a.lines.count) of \(lines), or not one myself")
    }
    for l in a.lines {
      guard isID(l.id), l.primaryID.map(isID) ?? true else { fatalError("a bad id in \(l)") }
      for r in l.slots where r.lowerBound < 0 || r.upperBound >= ClusterSlots.count {
        fatalError("a range that is not of slots: \(r)")
      }
    }
    guard a.lines.reduce(0, { $0 + $1.slots.count }) <= ClusterSlots.count else { fatalError("more ranges than slots") }
    // The bookkeeping over that report, as the holder keeps it.
    var migrations = ClusterMigrations()
    let primaries = Set(a.addresses.values).union([from])
    migrations.update([from: (sentMs: 1, report: a)], primaries: primaries)
    _ = migrations.importers
    _ = migrations.changedSlots(from: ClusterMigrations())
  case (.failure(let e), .failure):
    guard case .protocolViolation = e else { fatalError("not a protocol violation: \(e)") }
  default:
    fatalError("bulk and verbatim disagree: \(bulk) against \(verbatim)")
  }
  return 0
}
