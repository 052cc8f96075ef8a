import Foundation
import Glibc
import Synchronization

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
  private let state = Mutex<(mode: Mode, stopped: Bool, sockets: Set<Int32>)>((.pass, false, []))

  public init(to target: UInt16) throws {
    self.target = target
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    var one: Int32 = 1
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
    var addr = Self.loopback(0)
    _ = withUnsafePointer(to: &addr) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    listen(fd, 64)
    var len = socklen_t(MemoryLayout<sockaddr_in>.size)
    withUnsafeMutablePointer(to: &addr) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(fd, $0, &len) }
    }
    port = UInt16(bigEndian: addr.sin_port)
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

  static func loopback(_ port: UInt16) -> sockaddr_in {
    var a = sockaddr_in()
    a.sin_family = sa_family_t(AF_INET)
    a.sin_port = port.bigEndian
    a.sin_addr.s_addr = inet_addr("127.0.0.1")
    return a
  }

  /// Closes with RST (SO_LINGER 0) after waking any thread blocked on it.
  static func abort(_ fd: Int32) {
    var l = linger(l_onoff: 1, l_linger: 0)
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, socklen_t(MemoryLayout<linger>.size))
    shutdown(fd, Int32(SHUT_RDWR))
  }

  private func acceptLoop() {
    defer { close(listener) }
    while !state.withLock({ $0.stopped }) {
      var p = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
      guard poll(&p, 1, 20) > 0 else { continue }
      let client = accept(listener, nil, nil)
      guard client >= 0 else { continue }
      if state.withLock({ $0.mode }) == .reset {
        Self.abort(client)
        close(client)
        continue
      }
      let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
      var addr = Self.loopback(target)
      let rc = withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
          connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
      }
      guard rc == 0 else {
        close(upstream)
        Self.abort(client)
        close(client)
        continue
      }
      state.withLock { $0.sockets.formUnion([client, upstream]) }
      let pair = Pair()
      Thread.detachNewThread { [self] in pump(from: client, to: upstream, pair) }
      Thread.detachNewThread { [self] in pump(from: upstream, to: client, pair) }
    }
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
          close(a)
          close(b)
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
      var p = pollfd(fd: a, events: Int16(POLLIN), revents: 0)
      guard poll(&p, 1, 10) > 0 else { continue }
      let n = buf.withUnsafeMutableBytes { recv(a, $0.baseAddress, $0.count, 0) }
      guard n > 0 else { return }
      // The mode as of now, not as of before the wait: a fault starts at once.
      switch state.withLock({ $0.mode }) {
      case .pass: guard sendAll(b, Array(buf[0..<n])) else { return }
      case .delay(let ms):
        usleep(UInt32(ms * 1000))
        guard sendAll(b, Array(buf[0..<n])) else { return }
      case .blackHole: held += buf[0..<n]
      case .reset: return
      }
    }
  }

  private func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    var off = 0
    while off < bytes.count {
      let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + off, $0.count - off, Int32(MSG_NOSIGNAL)) }
      if n <= 0 { return false }
      off += n
    }
    return true
  }
}
