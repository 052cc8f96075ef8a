import Foundation
import Glibc
import Synchronization
import SystemCalls

/// The worker processes of a run, as a coordinator (`Coordinator`, `RedisCoordinator`)
/// keeps them: each is a re-execution of this binary (never fork without exec) with the
/// arguments `arguments(worker, incarnation)` gives, its stdin and stdout closed.
///
/// The life of a run, in the order a coordinator calls it:
///  1. `startAll`, then `waitUntilReady`: every worker has written its ready file;
///  2. during the run, `restart(_:)` after a chaos kill (SIGKILL, then its next
///     incarnation, which joins at once: the go file is there), `noteUnexpectedExits`
///     for workers that died on their own (not restarted);
///  3. `waitForAll`, then `noteMissingResults`: every incarnation's exit and last result
///     judged; `forEachResult` walks every incarnation's latest result, for the merge;
///  4. `stopAll` (SIGKILL whatever still runs) when the run ends, however it ends.
/// SIGINT and SIGTERM set `interrupted` (`checkInterrupted` throws `InterruptedRun`), so
/// that the run stops and cleans up instead of dying with its workers left behind.
final class WorkerFleet: @unchecked Sendable {
  let dir: ControlDirectory
  /// Per worker: its running process (nil once it has exited and been judged), and its
  /// current incarnation.
  private(set) var processes: [Process?]
  private(set) var incarnations: [Int]
  /// What went wrong with the workers, for the report.
  var failures: [String] = []
  /// The arguments of a worker's incarnation (set once, before `startAll`).
  var arguments: (_ worker: Int, _ incarnation: Int) -> [String]
  private let executable: String
  private let interruptFlag = Atomic<Bool>(false)
  private var signalSources: [DispatchSourceSignal] = []

  init(count: Int, dir: ControlDirectory, arguments: @escaping (_ worker: Int, _ incarnation: Int) -> [String]) {
    self.dir = dir
    self.arguments = arguments
    processes = Array(repeating: nil, count: count)
    incarnations = Array(repeating: 0, count: count)
    // `MC_STRESS_WORKER_EXEC`: a program to start in place of this one for each worker,
    // with the same arguments (a profiler's wrapper: `scripts/callgrind.sh` counts a
    // worker's instructions a get so); it must run cache-stress with them.
    executable = ProcessInfo.processInfo.environment["MC_STRESS_WORKER_EXEC"] ?? FleetMember.ownBinary
    for sig in [SIGINT, SIGTERM] {
      SystemCall.ignoreSignal(sig)
      let src = DispatchSource.makeSignalSource(signal: sig, queue: .global())
      src.setEventHandler { [weak self] in self?.interruptFlag.store(true, ordering: .relaxed) }
      src.resume()
      signalSources.append(src)
    }
  }

  var count: Int { processes.count }

  /// Whether SIGINT or SIGTERM came.
  var interrupted: Bool { interruptFlag.load(ordering: .relaxed) }

  /// Throws `InterruptedRun` once SIGINT or SIGTERM came.
  func checkInterrupted() throws { if interrupted { throw InterruptedRun() } }

  // MARK: Starting

  /// Starts incarnation 0 of every worker.
  func startAll() throws {
    for w in processes.indices { processes[w] = try spawn(w, 0) }
  }

  private func spawn(_ w: Int, _ inc: Int) throws -> Process {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
    p.arguments = arguments(w, inc)
    p.standardInput = FileHandle.nullDevice
    p.standardOutput = FileHandle.nullDevice
    do { try p.run() } catch { throw StressFailure("cannot start worker \(w) (\(executable)): \(error)") }
    return p
  }

  /// Waits (up to 120 s) until every worker has said it is ready; a worker that exits
  /// before is a failure of the run.
  func waitUntilReady() throws {
    let deadline = Clock.seconds() + 120
    for w in processes.indices {
      while !dir.isReady(w, 0) {
        try checkInterrupted()
        if let p = processes[w], !p.isRunning {
          throw StressFailure("worker \(w) exited with status \(p.terminationStatus) before it was ready")
        }
        if Clock.seconds() > deadline { throw StressFailure("worker \(w) was not ready within 120 s") }
        SystemCall.sleep(microseconds: 2000)
      }
    }
  }

  // MARK: During the run

  /// The workers whose process runs now.
  var running: [Int] { processes.indices.filter { processes[$0]?.isRunning == true } }

  /// The worker whose running process is `pid`, if any.
  func worker(withPID pid: Int32) -> Int? {
    processes.indices.first { processes[$0]?.processIdentifier == pid && processes[$0]!.isRunning }
  }

  /// SIGKILLs worker `w` and starts its next incarnation; returns the pid killed.
  /// Throws when the new incarnation cannot start (the worker is then left out).
  @discardableResult
  func restart(_ w: Int) throws -> Int32 {
    let pid = processes[w]?.processIdentifier ?? 0
    if let p = processes[w] {
      try? SystemCall.kill(p.processIdentifier, SIGKILL)
      p.waitUntilExit()
    }
    incarnations[w] += 1
    processes[w] = nil
    processes[w] = try spawn(w, incarnations[w])
    return pid
  }

  /// A worker that exits before the end on its own is a failure (not restarted).
  /// Workers stop at `end`: one found stopped once the end has passed (a coordinator
  /// starved of CPU, or busy restarting a victim, can look that late) may have finished
  /// normally, and `waitForAll` judges its exit status instead.
  func noteUnexpectedExits(end: UInt64) {
    for w in processes.indices {
      guard let p = processes[w], !p.isRunning else { continue }
      if Clock.nanoseconds() >= end { return }
      failures.append("worker \(w).\(incarnations[w]) exited early (\(Self.how(p)))")
      processes[w] = nil
    }
  }

  // MARK: The end

  /// Waits for every worker to exit (SIGKILLing one still running at `deadline`), and
  /// notes each that did not exit with status 0.
  func waitForAll(deadline: UInt64) throws {
    for w in processes.indices {
      guard let p = processes[w] else { continue }
      while p.isRunning {
        try checkInterrupted()
        if Clock.nanoseconds() > deadline {
          try? SystemCall.kill(p.processIdentifier, SIGKILL)
          p.waitUntilExit()
          failures.append("worker \(w).\(incarnations[w]) did not stop; killed")
          break
        }
        SystemCall.sleep(microseconds: 5000)
      }
      p.waitUntilExit()
      if p.terminationReason == .uncaughtSignal || p.terminationStatus != 0,
        !failures.contains(where: { $0.hasPrefix("worker \(w).\(incarnations[w])") })
      {
        failures.append("worker \(w).\(incarnations[w]) exited with \(Self.how(p))")
      }
      processes[w] = nil
    }
  }

  /// Notes each worker whose last incarnation left no final result (`isFinal` reads it).
  func noteMissingResults(isFinal: (_ worker: Int, _ incarnation: Int) -> Bool) {
    for w in incarnations.indices where !isFinal(w, incarnations[w]) {
      failures.append("worker \(w).\(incarnations[w]) left no final result")
    }
  }

  /// Calls `body` with every incarnation of every worker, in order: survivors' final
  /// results, and for killed incarnations what they had flushed before the kill.
  func forEachIncarnation(_ body: (_ worker: Int, _ incarnation: Int) -> Void) {
    for w in incarnations.indices {
      for inc in 0...incarnations[w] { body(w, inc) }
    }
  }

  /// SIGKILLs every worker still running and waits for them.
  func stopAll() {
    for case let p? in processes where p.isRunning {
      try? SystemCall.kill(p.processIdentifier, SIGKILL)
      p.waitUntilExit()
    }
  }

  private static func how(_ p: Process) -> String {
    p.terminationReason == .uncaughtSignal ? "signal \(p.terminationStatus)" : "status \(p.terminationStatus)"
  }
}

/// A run stopped by SIGINT or SIGTERM (exit 130).
struct InterruptedRun: Error, CustomStringConvertible {
  var description = "interrupted; workers stopped, files removed"
}

/// The worker's side of the fleet: waiting for the go file, starting its threads at the
/// run's start, and flushing its result file until they are done, all while its
/// coordinator lives (a worker whose coordinator is gone stops, exit 2).
enum FleetMember {
  /// The run's window from the go file (a restarted worker finds it at once); nil when
  /// the coordinator went away first.
  static func awaitGo(_ dir: ControlDirectory, coordinator: Int32) -> (start: UInt64, end: UInt64)? {
    while true {
      if let window = dir.readGo() { return window }
      if SystemCall.parentProcessID() != coordinator { return nil }
      SystemCall.sleep(microseconds: 1000)
    }
  }

  /// Starts `count` threads (1 MiB of stack each). Thread t calls `prepare(t)` at once,
  /// waits for `start` (with `precise`, sleeping until 2 ms before it, then yielding:
  /// threads of a run start together; otherwise in sleeps of up to 10 ms), then runs
  /// what `prepare` returned. The group is left when every thread is done.
  static func startThreads(
    _ count: Int, at start: UInt64, precise: Bool, _ prepare: @escaping @Sendable (Int) -> () -> Void
  ) -> DispatchGroup {
    let group = DispatchGroup()
    for t in 0..<count {
      group.enter()
      let th = Thread {
        let body = prepare(t)
        while case let now = Clock.nanoseconds(), now < start {
          let wait = start - now
          if !precise {
            SystemCall.sleep(microseconds: UInt32(min(wait / 1000, 10_000)))
          } else if wait > 2_000_000 {
            SystemCall.sleep(microseconds: UInt32(min(wait / 2000, 100_000)))
          } else {
            SystemCall.yield()
          }
        }
        body()
        group.leave()
      }
      th.stackSize = 1 << 20
      th.start()
    }
    return group
  }

  /// This binary's path, which every process of a run re-executes (never fork without
  /// exec): the workers, and `--kill-growers`' growers.
  static let ownBinary =
    (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]

  /// Whether a thread's `n`th finding (a corrupt, wrong or late read) is published and
  /// flushed the moment it is counted: the 1st, 2nd, 4th, 8th..., so that any run with
  /// findings reports one however soon its worker is SIGKILLed, and a run that plants
  /// them pays for few flushes.
  static func flushesFinding(_ n: Int) -> Bool { n > 0 && n & (n &- 1) == 0 }

  /// Calls `flush` every `interval` seconds, and at once whenever `wake` is signalled,
  /// until `group`'s threads are done (which signals `wake` too); false when the
  /// coordinator went away meanwhile.
  static func flushUntilDone(
    _ group: DispatchGroup, coordinator: Int32, wake: DispatchSemaphore,
    interval: TimeInterval = WorkerTiming.flushInterval, _ flush: () -> Void
  ) -> Bool {
    group.notify(queue: .global()) { wake.signal() }
    while true {
      _ = wake.wait(timeout: .now() + interval)
      if group.wait(timeout: .now()) == .success { return true }
      if SystemCall.parentProcessID() != coordinator { return false }
      flush()
    }
  }
}
