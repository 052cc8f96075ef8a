import Foundation
import Glibc
import MappedCache
import SystemCalls
import TestSupport
import Testing

@testable import MappedCacheRedis

/// A fake server on a loopback port for replies no real server sends: it reads commands
/// and answers each with what `respond` returns (nil: no answer, to test timeouts).
final class FakeServer: @unchecked Sendable {
  let port: UInt16
  private let listener: Int32
  private let respond: @Sendable (RESPValue) -> [UInt8]?
  private let stopped = SeenMutex(false)
  private let accepted = DispatchSemaphore(value: 0)

  init(respond: @escaping @Sendable (RESPValue) -> [UInt8]?) throws {
    self.respond = respond
    let fd = try SystemCall.socket(family: AF_INET)
    try SystemCall.setOption(fd, level: SOL_SOCKET, SO_REUSEADDR, 1)
    port = try SystemCall.bind(fd, to: .loopback(port: 0)).port
    try SystemCall.listen(fd, backlog: 16)
    listener = fd
    Thread.detachNewThread { [self] in serve() }
  }

  var url: String { "redis://127.0.0.1:\(port)" }

  private func serve() {
    while !stopped.withLock({ $0 }) {
      guard (try? SystemCall.poll(listener, events: Int32(POLLIN), milliseconds: 50)) ?? 0 != 0,
        let c = try? SystemCall.accept(listener)
      else { continue }
      Thread.detachNewThread { [self] in handle(c) }
    }
    SystemCall.close(listener)
  }

  private func handle(_ c: Int32) {
    defer { SystemCall.close(c) }
    var parser = RESPParser()
    var buf = [UInt8](repeating: 0, count: 4096)
    while !stopped.withLock({ $0 }) {
      guard (try? SystemCall.poll(c, events: Int32(POLLIN), milliseconds: 50)) ?? 0 != 0 else { continue }
      guard let n = try? SystemCall.receive(c, into: &buf), n > 0 else { return }
      parser.append(buf[0..<n])
      while let cmd = try? parser.next() {
        guard let out = respond(cmd) else { continue }
        if out.isEmpty { return }  // an empty answer: close the connection
        _ = try? SystemCall.sendAll(c, out)
      }
    }
  }

  func stop() { stopped.withLock { $0 = true } }
  deinit { stop() }
}

extension RESPValue {
  /// The command name of a request (upper-cased).
  var commandName: String { (elements?.first?.string ?? "").uppercased() }
}
