import Foundation
import Glibc
import SystemCalls

/// (A target of its own: the Redis tests and `mc-test-helper near-stale-check` both use it.)
///
/// A TCP proxy on a loopback port in front of a server, for network faults between a
/// cache and Redis: pass, delay every chunk, black-hole (hold the bytes, keep the
/// sockets), or reset every connection (RST) and refuse new ones while in that mode.
public final class FaultProxy: @unchecked Sendable {
  public enum Mode: Equatable, Sendable {
    case pass
    case delay(milliseconds: Int)
    case blackHole
    case reset
  }

  public let port: UInt16
  private let target: UInt16
  private let listener: Int32
  private let state = SeenMutex<(mode: Mode, stopped: Bool, sockets: Set<Int32>)>((.pass, false, []))

  public init(to target: UInt16) throws {
    self.target = target
    let fd = try SystemCall.socket(family: AF_INET)
    do {
      try SystemCall.setOption(fd, level: SOL_SOCKET, SO_REUSEADDR, 1)
      port = try SystemCall.bind(fd, to: .loopback(port: 0)).port
      try SystemCall.listen(fd, backlog: 64)
    } catch {
      SystemCall.close(fd)
      throw error
    }
    listener = fd
    Thread.detachNewThread { [self] in acceptLoop() }
  }

  public var url: String { "redis://127.0.0.1:\(port)/0" }

  // A descriptor is closed only under the state lock, after it left `sockets`, and only
  // once both pumps of its connection are done with it: a descriptor closed while the
  // other pump could still send on it could be reused by the next accepted connection,
  // and that pump would send one connection's held bytes (a reply) to another client.
  // So every shutdown of a descriptor in `sockets` is made under the lock too.

  public var mode: Mode {
    get { state.withLock { $0.mode } }
    set {
      state.withLock { s in
        s.mode = newValue
        if newValue == .reset { for fd in s.sockets { Self.abort(fd) } }
      }
    }
  }

  public func stop() {
    state.withLock { s in
      s.stopped = true
      for fd in s.sockets { Self.abort(fd) }
    }
  }

  deinit { stop() }

  /// Closes with RST (SO_LINGER 0) after waking any thread blocked on it.
  static func abort(_ fd: Int32) {
    SystemCall.setResetOnClose(fd)
    SystemCall.shutdown(fd, writesOnly: false)
  }

  private func acceptLoop() {
    defer { SystemCall.close(listener) }
    while !state.withLock({ $0.stopped }) {
      guard (try? SystemCall.poll(listener, events: Int32(POLLIN), milliseconds: 20)) ?? 0 != 0,
        let client = try? SystemCall.accept(listener)
      else { continue }
      if state.withLock({ $0.mode }) == .reset {
        Self.abort(client)
        SystemCall.close(client)
        continue
      }
      guard let upstream = Self.connectUpstream(target) else {
        Self.abort(client)
        SystemCall.close(client)
        continue
      }
      state.withLock { $0.sockets.formUnion([client, upstream]) }
      let pair = Pair()
      Thread.detachNewThread { [self] in pump(from: client, to: upstream, pair) }
      Thread.detachNewThread { [self] in pump(from: upstream, to: client, pair) }
    }
  }

  /// A blocking connection to the server on 127.0.0.1:`port`; nil when it refuses.
  private static func connectUpstream(_ port: UInt16) -> Int32? {
    guard let fd = try? SystemCall.socket(family: AF_INET) else { return nil }
    guard (try? SystemCall.connect(fd, to: .loopback(port: port))) == true else {
      SystemCall.close(fd)
      return nil
    }
    return fd
  }

  /// The two pumps of one connection: the second to finish closes both descriptors.
  private final class Pair: @unchecked Sendable {
    var finished = 0
  }

  /// Copies one direction until either side closes, obeying the mode chunk by chunk.
  private func pump(from a: Int32, to b: Int32, _ pair: Pair) {
    var buf = [UInt8](repeating: 0, count: 16 << 10)
    var held: [UInt8] = []
    defer {
      state.withLock { s in
        // The first pump to finish wakes the other (RST on both sides); the second closes.
        if s.sockets.contains(a) {
          s.sockets.remove(a)
          s.sockets.remove(b)
          Self.abort(a)
          Self.abort(b)
        }
        pair.finished += 1
        if pair.finished == 2 {
          SystemCall.close(a)
          SystemCall.close(b)
        }
      }
    }
    while true {
      let (mode, stopped) = state.withLock { ($0.mode, $0.stopped) }
      if stopped || mode == .reset { return }
      if mode != .blackHole && !held.isEmpty {
        guard sendAll(b, held) else { return }
        held.removeAll()
      }
      guard (try? SystemCall.poll(a, events: Int32(POLLIN), milliseconds: 10)) ?? 0 != 0 else { continue }
      guard let n = try? SystemCall.receive(a, into: &buf), n > 0 else { return }
      // The mode as of now, not as of before the wait: a fault starts at once.
      switch state.withLock({ $0.mode }) {
      case .pass: guard sendAll(b, Array(buf[0..<n])) else { return }
      case .delay(let ms):
        SystemCall.sleep(microseconds: UInt32(ms * 1000))
        guard sendAll(b, Array(buf[0..<n])) else { return }
      case .blackHole: held += buf[0..<n]
      case .reset: return
      }
    }
  }

  private func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool { (try? SystemCall.sendAll(fd, bytes)) != nil }
}
