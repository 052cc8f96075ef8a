/// Test hook: shifts the wall clock that this process's caches read, to play a process
/// whose clock is far ahead or behind the others' (`mc-test-helper`'s clock commands).
/// Call it before opening any cache and never while one is in use.
package enum TestClock {
  /// The offset added to every wall-clock reading, in milliseconds (0 = the real clock).
  package static var offsetMilliseconds: Int64 {
    get { SystemCall.clockOffsetMilliseconds }
    set { SystemCall.clockOffsetMilliseconds = newValue }
  }
}
