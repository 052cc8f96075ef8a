import Foundation
import Glibc
import MappedCache
import MappedCacheRedis
import SystemCalls

// Child-process commands for the fleet-wide single flight tests (issue 18).
let fleetCommands: [String: HelperCommand] = [
  // near-fleet PATH URL PREFIX KEY COUNTER LEASE_MS SLOW GO: one process of a host (file
  // PATH) that waits for the file GO to exist, then gets KEY with a fleet-wide compute.
  // The computation INCRs COUNTER in Redis (the tests count computations with it); with
  // SLOW=1 the first one records its pid under COUNTER:pid and hangs (to be SIGKILLed).
  // Prints "VALUE fromCache".
  "near-fleet": { args in
    guard args.count == 8, let leaseMs = Double(args[5]) else { return 64 }
    let (path, url, prefix, key, counter, slow, go) = (args[0], args[1], args[2], args[3], args[4], args[6], args[7])
    let remote = try RedisCache<String>(url: url, keyPrefix: prefix, options: RedisOptions(connectTimeout: 0.5))
    let near = try NearCache<String>(
      path: path, remote: remote, maxStaleness: .seconds(3), options: NearCacheOptions(capacity: 4 << 20))
    let raw = try RedisClient(url: url)
    while access(go, F_OK) != 0 { usleep(1000) }
    let options = ComputeOptions(waitTimeout: 30, maxPollInterval: 0.02, fleetWide: true, leaseDuration: leaseMs / 1000)
    let result = SeenMutex<Result<(String, Bool), Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task {
      do {
        let r = try await near.object(forKey: key, expires: .seconds(60), options: options) {
          guard case .integer(let n) = try raw.call("INCR", counter) else { throw CacheError.invalidArgument("INCR") }
          if slow == "1" && n == 1 {
            try raw.call("SET", counter + ":pid", String(getpid()))
            while true { sleep(1) }
          }
          return "value-\(getpid())-\(n)"
        }
        result.withLock { $0 = .success((r.value, r.fromCache)) }
      } catch {
        result.withLock { $0 = .failure(error) }
      }
      done.signal()
    }
    done.wait()
    near.close()
    let (v, fromCache) = try result.withLock { $0! }.get()
    print("\(v) \(fromCache)")
    return 0
  }
]
