import Foundation
import Glibc
import MappedCache
import MappedCacheRedis

// Child-process commands for the Redis near-cache tests and benchmark (issue 17).
let redisCommands: [String: HelperCommand] = [
  // near-worker PATH URL PREFIX SECONDS KEY: a worker process of a host. It stands for the
  // invalidation role and reads KEY every few ms until SECONDS have passed (or it is killed).
  "near-worker": { args in
    guard args.count == 5, let seconds = Double(args[3]) else { return 64 }
    let remote = try RedisCache<String>(url: args[1], keyPrefix: args[2], options: RedisOptions(connectTimeout: 0.3))
    let near = try NearCache<String>(
      path: args[0], remote: remote, maxStaleness: .milliseconds(300),
      options: NearCacheOptions(capacity: 4 << 20))
    let end = Date().addingTimeInterval(seconds)
    var reads = 0
    var errors = 0
    while Date() < end {
      if (try? near.object(forKey: args[4])) != nil { reads += 1 } else { errors += 1 }
      usleep(5000)
    }
    near.close()
    print("reads=\(reads) misses=\(errors)")
    return 0
  },
  // near-op PATH URL PREFIX get|set|remove KEY [VALUE]: one operation through a host's
  // near cache in a process of its own; prints the value read ("nil" when none), or "ok".
  "near-op": { args in
    guard args.count >= 5 else { return 64 }
    let remote = try RedisCache<String>(url: args[1], keyPrefix: args[2], options: RedisOptions(connectTimeout: 0.5))
    let near = try NearCache<String>(
      path: args[0], remote: remote, maxStaleness: .seconds(3),
      options: NearCacheOptions(capacity: 4 << 20, standsForHolder: false))
    switch args[3] {
    case "get": print(try near.object(forKey: args[4]) ?? "nil")
    case "set" where args.count == 6:
      try near.setObject(args[5], forKey: args[4], expires: .seconds(60))
      print("ok")
    case "remove": print(try near.removeObject(forKey: args[4]) ? "ok" : "absent")
    default: return 64
    }
    return 0
  },
  "near-bench": { args in try NearBench.run(args) },
  "near-stale-check": { args in try NearBench.staleCheck(args) },
  // near-insn-loop URL near|plain N: N hit reads of one key (for callgrind: run with N
  // and 2N; the difference over N is one read's instructions).
  "near-insn-loop": { args in
    guard args.count == 3, let n = Int(args[2]) else { return 64 }
    let tag = "\(getpid())"
    let path = "/dev/shm/mc-nearinsn-\(tag).mcache"
    defer {
      unlink(path)
      unlink(path + ".holder")
    }
    let value = String(repeating: "v", count: 40)
    var sink = 0
    if args[1] == "plain" {
      let c = try SharedCache<String>(path: path, capacity: 4 << 20)
      try c.setObject(value, forKey: "user:1")
      for _ in 0..<n { sink &+= try c.object(forKey: "user:1")?.utf8.count ?? 0 }
    } else {
      let remote = try RedisCache<String>(url: args[0], keyPrefix: "ni\(tag):")
      let near = try NearCache<String>(
        path: path, remote: remote, maxStaleness: .seconds(60),
        // (A cluster's slot map is read once a minute here: its reads would count too.)
        options: NearCacheOptions(capacity: 4 << 20, heartbeatInterval: 1, topologyInterval: 60))
      try remote.setObject(value, forKey: "user:1")
      while !near.statistics.fenceFresh { usleep(1000) }
      usleep(100_000)
      _ = try near.object(forKey: "user:1")
      for _ in 0..<n { sink &+= try near.object(forKey: "user:1")?.utf8.count ?? 0 }
      near.close()
    }
    print("sink=\(sink)")
    return 0
  },
]
