import Foundation
import Glibc
import TestSupport
import Testing

@testable import MappedCache

/// Issue 21, item 3: processes whose wall clocks disagree (`mc-test-helper clock-op`
/// shifts its own clock with `TestClock`). The rule (`Expiry`, DESIGN section 7): an
/// entry is expired for a reader once its expiry is past by the reader's clock, or
/// when it lies further ahead than its own time to live (rounded up to a power of two)
/// plus 2 s, which only a clock ahead of the reader's could have written.
@Suite(.serialized) struct ReliabilityClockTests {
  static let year: Int64 = 365 * 86_400

  func op(_ path: String, offset: Int64, _ args: String...) throws -> [String: String] {
    let r = try ChildProcess.run(RelSupport.helper, ["clock-op", path, "\(offset)"] + args, timeout: 60)
    #expect(!r.signaled && r.status == 0, "clock-op \(offset) \(args): \(r.status) \(r.stderr)")
    return RelSupport.fields(r.stdout)
  }

  /// Whether a process whose clock is `offset` seconds off finds `key` (and whether it
  /// is still stored at all, as `allowingExpired` reads see).
  func sees(_ path: String, offset: Int64, _ key: String) throws -> (found: Bool, present: Bool) {
    let f = try op(path, offset: offset, "get", key)
    return (f["found"] == "true", f["present"] == "true")
  }

  @Test func expiryStaysSaneWhenClocksDisagree() throws {
    let path = TestFiles.tempPath("clock")
    defer { TestFiles.cleanup(path) }
    let cache = try SharedCache<String>(path: path, capacity: 1 << 20)

    // Written by a process 10 years ahead, for 60 s: for itself it lives; for a
    // process with the right clock it is not immortal (10 years) but expired, since no
    // 60 s entry can expire 10 years from now; the sweeper reclaims it.
    #expect(try op(path, offset: 10 * Self.year, "set", "ahead", "60")["set"] == "ok")
    #expect(try sees(path, offset: 10 * Self.year, "ahead") == (true, true))
    #expect(try cache.object(forKey: "ahead") == nil)
    #expect(try cache.object(forKey: "ahead", allowingExpired: true) == "v", "still stored, as expired")

    // Written by a process 10 years behind: already past for everyone else.
    #expect(try op(path, offset: -10 * Self.year, "set", "behind", "60")["set"] == "ok")
    #expect(try sees(path, offset: -10 * Self.year, "behind") == (true, true))
    #expect(try cache.object(forKey: "behind") == nil)

    // Never-expiring entries do not depend on anyone's clock.
    #expect(try op(path, offset: 10 * Self.year, "set", "forever", "0")["set"] == "ok")
    #expect(try cache.object(forKey: "forever") == "v")
    #expect(try sees(path, offset: -10 * Self.year, "forever").found)

    #expect(try cache.removeExpiredObjects() >= 2, "the sweeper reclaims what a wrong clock wrote")
    #expect(try cache.object(forKey: "ahead", allowingExpired: true) == nil)
    #expect(try cache.object(forKey: "behind", allowingExpired: true) == nil)

    // Written now for 60 s: small skews either way change nothing; a reader a year
    // ahead finds it past; one a year behind finds it further ahead than 60 s could
    // reach, and does not keep it alive for a year.
    try cache.setObject("v", forKey: "now", expires: .seconds(60))
    for offset: Int64 in [-2, -1, 1, 2] {
      #expect(try sees(path, offset: offset, "now").found, "a reader \(offset) s off")
    }
    #expect(try !sees(path, offset: Self.year, "now").found)
    #expect(try !sees(path, offset: -Self.year, "now").found)
    #expect(try cache.object(forKey: "now") == "v", "the right clock still reads it")

    // A day's entry tolerates a reader an hour behind (within its horizon), not a week.
    try cache.setObject("v", forKey: "day", expires: .seconds(86_400))
    #expect(try sees(path, offset: -3_600, "day").found)
    #expect(try !sees(path, offset: -7 * 86_400, "day").found)

    // A clock set before 1970 reads as 1970 instead of trapping; what it writes is long past.
    #expect(try op(path, offset: -60 * Self.year, "set", "epoch", "60")["set"] == "ok")
    #expect(try op(path, offset: -60 * Self.year, "get", "epoch")["found"] == "true")
    #expect(try cache.object(forKey: "epoch") == nil)
    #expect(try cache.verify().ok)
  }

  /// The horizon stored with each expiry: the bit length of the time left at the write.
  @Test func theHorizonBoundsWhatABehindReaderBelieves() {
    let now: UInt64 = 1_800_000_000_000
    let word = Expiry.stamp(now + 60_000, now: now)
    #expect(word & Format.expiryMask == now + 60_000)
    #expect((word & Expiry.horizonMask) >> Expiry.horizonShift == 16, "60,000 ms < 2^16")
    #expect(!Expiry.isExpired(word, now: now))
    #expect(!Expiry.isExpired(word, now: now - 7_000), "65.5 s + 2 s of horizon cover 67 s ahead")
    #expect(Expiry.isExpired(word, now: now - 8_000))
    #expect(Expiry.isExpired(word, now: now + 60_000))
    // Without a horizon (files of earlier builds) only the plain rule applies.
    #expect(!Expiry.isExpired(now + 60_000, now: now - 10 * 365 * 86_400_000))
    #expect(Expiry.stamp(0, now: now) == 0, "never stays never")
    #expect(Expiry.stamp(now - 5, now: now) >> Expiry.horizonShift == 1, "already past: the smallest horizon")
  }
}
