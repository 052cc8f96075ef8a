import Foundation
import Glibc
import MappedCacheRedis

// Child-process commands for the Redis near-cache tests and benchmark (issue 17).
let redisCommands: [String: HelperCommand] = [
  // near-worker PATH URL PREFIX SECONDS KEY: a worker process of a host. It stands for the
  // invalidation role and reads KEY every few ms until SECONDS have passed (or it is killed).
  "near-worker": { args in
    guard args.count == 5, let seconds = Double(args[3]) else { return 64 }
    let remote = try RedisCache<String>(url: args[1], keyPrefix: args[2], options: RedisOptions(connectTimeout: 0.3))
    let near = try NearCache<String>(path: args[0], remote: remote, maxStaleness: .milliseconds(300),
                                     options: NearCacheOptions(capacity: 4 << 20))
    let end = Date().addingTimeInterval(seconds)
    var reads = 0, errors = 0
    while Date() < end {
      if (try? near.object(forKey: args[4])) != nil { reads += 1 } else { errors += 1 }
      usleep(5000)
    }
    near.close()
    print("reads=\(reads) misses=\(errors)")
    return 0
  },
  "near-bench": { args in try NearBench.run(args) },
  "near-stale-check": { args in try NearBench.staleCheck(args) },
]
