import Foundation
import Glibc
import MappedCache
import Synchronization
import SystemCalls
import TestSupport
import Testing

@testable import MappedCacheRedis

@Suite struct RedisAvailabilityTests {
  /// `.ci/run` sets MC_REQUIRE_REDIS=1: there a missing redis-server is a failure, not a skip.
  @Test func redisServerIsInstalledWhenRequired() {
    if RedisServer.required {
      #expect(RedisServer.binary != nil, "MC_REQUIRE_REDIS=1 but redis-server is not on PATH")
    }
  }
}

@Suite(.enabled(if: RedisServer.available, "redis-server is not installed"), .serialized)
struct RedisClientTests {
  @Test func tcpAndUnixSocketsSpeakRESP3WithPipelining() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    for url in [server.url, server.unixURL] {
      let c = try RedisClient(url: url)
      #expect(try c.call("PING") == .simpleString("PONG"))
      #expect(c.isRESP3)
      // A RESP3-only type comes back as such.
      #expect(try c.call("HSET", "h", "f", "v") == .integer(1))
      #expect(
        try c.call("HGETALL", "h") == .map([RESPPair(.bulkString(Array("f".utf8)), .bulkString(Array("v".utf8)))]))
      let n = 500
      let cmds = (0..<n).map { ["SET", "p\($0)", "v\($0)"].map { Array($0.utf8) } }
      let replies = try c.pipeline(cmds)
      #expect(replies.count == n && replies.allSatisfy { $0 == .simpleString("OK") })
      let gets = try c.pipeline((0..<n).map { [Array("GET".utf8), Array("p\($0)".utf8)] })
      #expect(gets.enumerated().allSatisfy { $0.element.string == "v\($0.offset)" })
      // An error reply in a pipeline is a value; from `call` it is thrown.
      let mixed = try c.pipeline([[Array("INCR".utf8), Array("p1".utf8)], [Array("PING".utf8)]])
      #expect(mixed[0].errorMessage?.hasPrefix("ERR") == true && mixed[1] == .simpleString("PONG"))
      #expect(throws: CacheError.self) { try c.call("INCR", "p1") }
      _ = try c.call("FLUSHALL")
    }
  }

  @Test func resp2WhenAskedAndAuthWithUserAndPasswordAndSelect() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    let admin = server.client()
    _ = try admin.call("ACL", "SETUSER", "alice", "on", ">s3cret", "~*", "&*", "+@all")
    _ = try admin.call("CONFIG", "SET", "requirepass", "topsecret")
    // RESP2 by choice: same answers, no RESP3 types.
    let r2 = try RedisClient(
      url: "redis://:topsecret@127.0.0.1:\(server.port)/2", options: RedisOptions(useRESP3: false))
    #expect(try r2.call("PING") == .simpleString("PONG"))
    #expect(!r2.isRESP3)
    _ = try r2.call("SET", "db2key", "x")
    // ACL user and password over RESP3; the SELECT put that key in db 2 only.
    let alice3 = try RedisClient(url: "redis://alice:s3cret@127.0.0.1:\(server.port)/2")
    #expect(try alice3.call("GET", "db2key").string == "x")
    #expect(alice3.isRESP3)
    let alice0 = try RedisClient(url: "redis://alice:s3cret@127.0.0.1:\(server.port)/0")
    #expect(try alice0.call("GET", "db2key") == .null)
    // Wrong credentials are a remote error, at once (not retried until the timeout).
    let wrong = try RedisClient(url: "redis://alice:nope@127.0.0.1:\(server.port)")
    #expect {
      try wrong.call("PING")
    } throws: { e in
      guard case CacheError.remoteError(_, let m) = e else { return false }
      return m.contains("WRONGPASS")
    }
    let none = try RedisClient(url: server.url)
    #expect(throws: CacheError.self) { try none.call("GET", "db2key") }
  }

  @Test func helloRefusedFallsBackToRESP2() throws {
    let seen = SeenMutex<[String]>([])
    let fake = try FakeServer { cmd in
      seen.withLock { $0.append(cmd.commandName) }
      switch cmd.commandName {
      case "HELLO": return Array("-ERR unknown command 'HELLO'\r\n".utf8)
      case "AUTH": return Array("+OK\r\n".utf8)
      case "SELECT": return Array("+OK\r\n".utf8)
      default: return Array("+PONG\r\n".utf8)
      }
    }
    defer { fake.stop() }
    let c = try RedisClient(url: "redis://:pw@127.0.0.1:\(fake.port)/3")
    #expect(try c.call("PING") == .simpleString("PONG"))
    #expect(!c.isRESP3)
    #expect(seen.withLock { $0 } == ["HELLO", "AUTH", "SELECT", "PING"])
  }

  @Test func hostileRepliesAreProtocolViolationsAndTimeoutsAreRemoteUnavailable() throws {
    let fake = try FakeServer { cmd in
      switch cmd.commandName {
      case "HELLO": return RESPValue.map([]).encoded()
      case "BIG": return Array("$999999999999\r\n".utf8)
      case "DEEP": return Array(String(repeating: "*1\r\n", count: 100).utf8)
      case "BADLEN": return Array("$3\r\nabcdef\r\n".utf8)
      case "SILENT": return nil
      case "CLOSE": return []
      default: return Array("+OK\r\n".utf8)
      }
    }
    defer { fake.stop() }
    let c = try RedisClient(
      url: fake.url, options: RedisOptions(commandTimeout: 0.2, limits: RESPLimits(maxBulkLength: 1 << 20)))
    for cmd in ["BIG", "DEEP", "BADLEN"] {
      #expect(
        performing: { try c.call(cmd, idempotent: false) },
        throws: { e in
          if case CacheError.protocolViolation = e { return true }
          return false
        })
      // The connection was closed; the next request works on a new one.
      #expect(try c.call("PING") == .simpleString("OK"))
    }
    let t0 = Date()
    #expect(
      performing: { try c.call("SILENT", idempotent: false) },
      throws: { e in
        if case CacheError.remoteUnavailable(_, let why) = e { return why.contains("timeout") }
        return false
      })
    #expect(Date().timeIntervalSince(t0) < 5)
    #expect(
      performing: { try c.call("CLOSE", idempotent: false) },
      throws: { e in
        if case CacheError.remoteUnavailable = e { return true }
        return false
      })
    #expect(try c.call("PING") == .simpleString("OK"))
    #expect(c.connectCount == 6)
  }

  @Test func notNowRepliesAreRetriedWithBackoff() throws {
    let count = SeenMutex(0)
    let fake = try FakeServer { cmd in
      switch cmd.commandName {
      case "HELLO": return RESPValue.map([]).encoded()
      case "GET":
        let n = count.withLock {
          $0 += 1
          return $0
        }
        let errors = [
          "-LOADING Redis is loading the dataset in memory\r\n", "-BUSY Redis is busy running a script\r\n",
          "-TRYAGAIN Multiple keys request during rehashing\r\n", "-CLUSTERDOWN The cluster is down\r\n",
        ]
        return Array((n <= errors.count ? errors[n - 1] : "$2\r\nok\r\n").utf8)
      default: return Array("+OK\r\n".utf8)
      }
    }
    defer { fake.stop() }
    let c = try RedisClient(url: fake.url, options: RedisOptions(maxRetries: 5, backoffBase: 0.001, backoffCap: 0.01))
    #expect(try c.call("GET", "k").string == "ok")
    #expect(c.retryCount == 4)
    // Past maxRetries the error is returned.
    count.withLock { $0 = 0 }
    let few = try RedisClient(url: fake.url, options: RedisOptions(maxRetries: 1, backoffBase: 0.001, backoffCap: 0.01))
    #expect(throws: CacheError.self) { try few.call("GET", "k") }
  }

  @Test func reconnectsAfterTheConnectionIsKilledAndFailsClearlyWhenTheServerIsGone() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    let c = server.client(RedisOptions(connectTimeout: 0.3, clientName: "victim"))
    _ = try c.call("SET", "k", "1")
    _ = try server.client().call("CLIENT", "KILL", "SKIPME", "yes", "TYPE", "normal")
    #expect(try c.call("GET", "k").string == "1")  // resent once on a new connection
    #expect(c.connectCount == 2)
    server.kill()
    let t0 = Date()
    #expect(
      performing: { try c.call("GET", "k") },
      throws: { e in
        if case CacheError.remoteUnavailable = e { return true }
        return false
      })
    let waited = Date().timeIntervalSince(t0)
    #expect(waited >= 0.2 && waited < 3, "\(waited)")  // attempts with backoff for about the connect timeout
    try server.start()
    #expect(try c.call("PING") == .simpleString("PONG"))
  }

  @Test func threadsShareAPoolOfConnectionsAndEachGetsItsOwnReplies() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    let c = server.client(RedisOptions(poolSize: 3))
    let wrong = Atomic<Int>(0)
    DispatchQueue.concurrentPerform(iterations: 8) { t in
      for i in 1...200 {
        // Each thread's counter: a reply that went to another thread would be off.
        guard case .integer(let n)? = try? c.call("INCR", "ctr\(t)"), n == i else {
          wrong.add(1, ordering: .relaxed)
          continue
        }
      }
    }
    #expect(wrong.load(ordering: .relaxed) == 0)
    #expect(c.connectCount >= 1 && c.connectCount <= 3)
    c.disconnect()
    #expect(try c.call("GET", "ctr7").string == "200")
    #expect(c.connectCount <= 4)
  }

  /// A push that came in the same read as a reply, after it, is delivered by the next
  /// wait at once, not when the wait times out (the holder would sit on an invalidation
  /// until its next heartbeat).
  @Test func aPushBufferedBehindAReplyIsDeliveredWithoutWaiting() throws {
    let push = RESPValue.push([.bulkString(Array("invalidate".utf8)), .array([.bulkString(Array("k".utf8))])])
    let fake = try FakeServer { cmd in
      switch cmd.commandName {
      case "HELLO": return RESPValue.map([]).encoded()
      default: return Array("+PONG\r\n".utf8) + push.encoded()
      }
    }
    defer { fake.stop() }
    let got = SeenMutex<[RESPValue]>([])
    let c = try RedisConnection.open(
      try RedisEndpoint(url: fake.url), RedisOptions(),
      pushHandler: { p in got.withLock { $0.append(p) } })
    #expect(c.resp3)
    let reply = try c.roundTrip([[Array("PING".utf8)]])[0]
    // Both may have come in one read, or the push in a later one: wait for it either way.
    let t0 = Date()
    var delivered = got.withLock { $0.count }
    while delivered == 0 && Date().timeIntervalSince(t0) < 10 { delivered += try c.waitForPushes(timeout: 10) }
    #expect(reply == .simpleString("PONG"))
    #expect(got.withLock { $0 } == [push])
    #expect(Date().timeIntervalSince(t0) < 5, "the push waited for the timeout")
  }

  @Test func pushesReachTheHandlerBetweenReplies() throws {
    let server = try RedisServer.forTest()
    defer { server.stop() }
    let pushes = SeenMutex<[RESPValue]>([])
    let c = server.client()
    let tracked = RedisClient(endpoint: c.endpoint, options: RedisOptions()) { p in pushes.withLock { $0.append(p) } }
    _ = try tracked.call("CLIENT", "TRACKING", "ON")
    _ = try tracked.call("GET", "watched")
    _ = try c.call("SET", "watched", "new")
    let arrived = try eventually(10) {
      _ = try tracked.call("PING")  // the push arrives before (or with) this reply
      return !pushes.withLock { $0 }.isEmpty
    }
    #expect(arrived)
    let p = pushes.withLock { $0 }.first
    #expect(p == .push([.bulkString(Array("invalidate".utf8)), .array([.bulkString(Array("watched".utf8))])]))
  }
}
