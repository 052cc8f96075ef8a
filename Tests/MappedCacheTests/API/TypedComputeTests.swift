import Foundation
import Glibc
import SystemCalls
import TestSupport
import Testing

@testable import MappedCache

// Get-or-compute: single flight across threads and processes, a dead claimer, waiting
// bounds, stale serving, negative caching, and AwesomeCache's cache-block form.

final class TCCounter: @unchecked Sendable {
  private let m = SeenMutex(0)
  func bump() -> Int {
    m.withLock {
      $0 += 1
      return $0
    }
  }
  var value: Int { m.withLock { $0 } }
}

/// A one-shot gate a compute can wait on.
final class TCGate: @unchecked Sendable {
  private let open = SeenMutex(false)
  func release() { open.withLock { $0 = true } }
  func wait() async { while !open.withLock({ $0 }) { try? await Task.sleep(nanoseconds: 2_000_000) } }
}

@Suite struct TypedComputeTests {
  @Test func hitAndMiss() async throws {
    let p = TestFiles.tempPath("tc-basic")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<String>(path: p, capacity: 1 << 20)
    let first = try await c.object(forKey: "k", expires: .seconds(60)) { "computed" }
    #expect(first.value == "computed" && !first.fromCache)
    let second = try await c.object(forKey: "k") { "again" }
    #expect(second.value == "computed" && second.fromCache)
    guard case .date? = try c.expiry(forKey: "k") else {
      Issue.record("expiry not applied")
      return
    }
    #expect(try !c.isComputing(forKey: "k"))
  }

  @Test func threadsOfOneProcessComputeOnce() async throws {
    let p = TestFiles.tempPath("tc-threads")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<Int>(path: p, capacity: 1 << 20)
    let computes = TCCounter()
    let results = try await withThrowingTaskGroup(of: (Int, Bool).self) { group in
      for _ in 0..<8 {
        group.addTask {
          // A wait that outlasts `waitTimeout` computes by design; on a loaded machine
          // whose shared task pool is held by other suites' tests, 30 s can pass
          // before a waiter runs again, so this test of single flight waits longer.
          let r = try await c.object(forKey: "shared", options: ComputeOptions(waitTimeout: 900)) {
            _ = computes.bump()
            try await Task.sleep(nanoseconds: 200_000_000)
            return 99
          }
          return (r.value, r.fromCache)
        }
      }
      var all: [(Int, Bool)] = []
      for try await r in group { all.append(r) }
      return all
    }
    #expect(computes.value == 1)
    #expect(results.allSatisfy { $0.0 == 99 })
    #expect(results.filter { !$0.1 }.count == 1)
  }

  @Test func failuresAreNotCachedUnlessAsked() async throws {
    let p = TestFiles.tempPath("tc-fail")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<String>(path: p, capacity: 1 << 20)
    struct Boom: Error {}
    let calls = TCCounter()
    for _ in 0..<2 {
      await #expect(throws: Boom.self) {
        _ = try await c.object(forKey: "k") {
          _ = calls.bump()
          throw Boom()
        }
      }
    }
    #expect(calls.value == 2)  // no negative caching by default
    #expect(try !c.isComputing(forKey: "k"))  // the claim was released

    let neg = ComputeOptions(cacheFailuresFor: 0.3)
    await #expect(throws: Boom.self) {
      _ = try await c.object(forKey: "n", options: neg) {
        _ = calls.bump()
        throw Boom()
      }
    }
    do {
      _ = try await c.object(forKey: "n", options: neg) {
        _ = calls.bump()
        return "x"
      }
      Issue.record("cached failure not served")
    } catch let CacheError.computeFailed(key, reason) {
      #expect(key == "n" && reason.contains("Boom"))
    }
    #expect(calls.value == 3)
    #expect(c.allKeys.isEmpty)  // the failure record is not a caller's key
    try await Task.sleep(nanoseconds: 400_000_000)
    let after = try await c.object(forKey: "n", options: neg) {
      _ = calls.bump()
      return "recovered"
    }
    #expect(after.value == "recovered" && calls.value == 4)
    // removeCachedFailure lets a caller retry at once.
    await #expect(throws: Boom.self) { _ = try await c.object(forKey: "m", options: neg) { throw Boom() } }
    #expect(try c.removeCachedFailure(forKey: "m"))
    #expect(try await c.object(forKey: "m", options: neg) { "ok" }.value == "ok")
    // A key too long to prefix gets a hashed failure record, still its own.
    let long = String(repeating: "L", count: 250)
    await #expect(throws: Boom.self) { _ = try await c.object(forKey: long, options: neg) { throw Boom() } }
    await #expect(throws: CacheError.self) { _ = try await c.object(forKey: long, options: neg) { "x" } }
    #expect(try await c.object(forKey: String(repeating: "L", count: 249), options: neg) { "other" }.value == "other")
  }

  @Test func readOnlyHandleComputesWithoutStoring() async throws {
    let p = TestFiles.tempPath("tc-ro")
    defer { TestFiles.cleanup(p) }
    let writer = try SharedCache<String>(path: p, capacity: 1 << 20)
    try writer.setObject("shared", forKey: "have")
    let reader = try SharedCache<String>(path: p, capacity: 1 << 20, policy: OpenPolicy(readOnly: true))
    let hit = try await reader.object(forKey: "have") { "never" }
    #expect(hit.value == "shared" && hit.fromCache)
    let miss = try await reader.object(forKey: "missing") { "local" }
    #expect(miss.value == "local" && !miss.fromCache)
    #expect(try writer.object(forKey: "missing") == nil)
  }

  @Test func waiterComputesItselfAfterTimeoutAndStaleIsServed() async throws {
    let p = TestFiles.tempPath("tc-timeout")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<String>(path: p, capacity: 1 << 20)
    try c.setObject("stale", forKey: "k", expires: .date(Date(timeIntervalSinceNow: -1)))
    let gate = TCGate()
    let holder = Task {
      try await c.object(forKey: "k") {
        await gate.wait()
        return "fresh"
      }
    }
    var waited = 0
    while try !c.isComputing(forKey: "k") && waited < 5000 {
      try await Task.sleep(nanoseconds: 1_000_000)
      waited += 1
    }
    #expect(try c.isComputing(forKey: "k"), "the holder never claimed the key")
    // Serve stale: returns the expired value at once while the holder computes.
    let stale = try await c.object(forKey: "k", options: ComputeOptions(serveStale: true)) { "never" }
    #expect(stale.value == "stale" && stale.fromCache)
    // Without stale serving, a short timeout ends the wait and this caller computes.
    let own = try await c.object(forKey: "k", options: ComputeOptions(waitTimeout: 0.1)) { "own" }
    #expect(own.value == "own" && !own.fromCache)
    gate.release()
    #expect(try await holder.value.value == "fresh")
    #expect(try c.object(forKey: "k") == "fresh")
  }

  @Test func awesomeCacheBlock() async throws {
    let p = TestFiles.tempPath("tc-block")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<String>(path: p, capacity: 1 << 20)
    func call(
      _ block:
        @escaping @Sendable (
          @escaping @Sendable (String, CacheExpiry) -> Void,
          @escaping @Sendable (Error?) -> Void
        ) -> Void
    ) async -> (String?, Bool, Error?) {
      await withCheckedContinuation { k in
        c.setObject(forKey: "k", cacheBlock: block) { v, fromCache, e in k.resume(returning: (v, fromCache, e)) }
      }
    }
    let failed = await call { _, failure in failure(nil) }
    #expect(failed.0 == nil && !failed.1 && failed.2 != nil)
    // success called later, from another thread.
    let made = await call { success, _ in
      DispatchQueue.global().asyncAfter(deadline: .now() + 0.05) { success("v", .seconds(600)) }
    }
    #expect(made.0 == "v" && !made.1 && made.2 == nil)
    let cached = await call { success, _ in success("other", .never) }
    #expect(cached.0 == "v" && cached.1)
    #expect(try c.object(forKey: "k") == "v")
    // A block that drops its closures without calling them releases the claim.
    c.setObject(forKey: "dropped", cacheBlock: { _, _ in }, completion: { _, _, _ in })
    #expect(try !c.isComputing(forKey: "dropped"))
  }

  // MARK: Across processes

  @Test func eightProcessesComputeExactlyOnce() throws {
    let p = TestFiles.tempPath("tc-race")
    let counter = "/dev/shm/mctest-tc-counter-\(getpid())-\(UUID().uuidString.prefix(8))"
    defer {
      TestFiles.cleanup(p)
      unlink(counter)
    }
    _ = try SharedCache<String>(path: p, capacity: 4 << 20)
    // Every child opens the cache, then waits for one shared moment, then asks.
    let start = UInt64(Date().timeIntervalSince1970 * 1000) + 2500
    // Start all eight first (each blocks only in itself), then collect their output.
    let children = try (0..<8).map { _ in
      try ChildProcess(
        TestFiles.binary("mc-test-helper"), ["compute-race", p, "hot", counter, "\(start)", "1000"],
        stderr: .discarded)
    }
    var lines: [String] = []
    for child in children {
      let r = child.wait()
      #expect(r.status == 0 && !r.signaled)
      lines.append(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }
    #expect(lines.count == 8)
    let computeLog = (try? String(contentsOfFile: counter, encoding: .utf8)) ?? ""
    let computes = computeLog.split(separator: "\n")
    #expect(computes.count == 1, "computed \(computes.count) times: \(computeLog)")
    // Everyone got the one computed value; exactly one process computed it.
    let late = lines.filter { $0.hasSuffix(" late") }.count
    #expect(late == 0, "\(late) children reached the start moment late: the race was not simultaneous")
    let values = Set(lines.map { $0.split(separator: " ").first.map(String.init) ?? "" })
    #expect(values.count == 1)
    #expect(lines.filter { $0.contains(" computed ") }.count == 1)
    #expect(lines.filter { $0.contains(" cached ") }.count == 7)
    #expect(computes.first.map { "value-from-" + $0.split(separator: " ").last! } == values.first)
  }

  @Test func killedClaimerReleasesItsClaim() throws {
    let p = TestFiles.tempPath("tc-kill")
    defer { TestFiles.cleanup(p) }
    let c = try SharedCache<String>(path: p, capacity: 4 << 20)
    let holder = try ChildProcess(TestFiles.binary("mc-test-helper"), ["compute-hold", p, "k"])
    var claimed = false
    for _ in 0..<2000 {
      if try c.isComputing(forKey: "k") {
        claimed = true
        break
      }
      usleep(5_000)
    }
    #expect(claimed, "the child never claimed the key")
    holder.kill(SIGKILL)
    #expect(holder.wait().signaled)
    #expect(try !c.isComputing(forKey: "k"))  // the kernel dropped the dead claimer's lock
    // A new process claims at once: its wait timeout is far longer than the run's limit,
    // so finishing at all shows it did not wait for the dead claimer.
    let r = try ChildProcess.run(TestFiles.binary("mc-test-helper"), ["compute-once", p, "k", "600"], timeout: 30)
    #expect(r.status == 0 && !r.signaled, "\(r.stderr)")
    #expect(r.stdout.hasSuffix(" computed\n"))
    #expect(try c.object(forKey: "k")?.hasPrefix("computed-by-") == true)
  }
}
