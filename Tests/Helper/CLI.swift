import Foundation
import MappedCache

// Child-process commands for the mapped-cache CLI tests (issue 5).
let cliCommands: [String: HelperCommand] = [
  // cli-writer PATH SECONDS: keeps a cache busy for SECONDS: sets (some with a TTL),
  // removals and reads of keys "w<n>" with values of 1 to 3000 bytes. Creates the
  // cache (4 MiB) when missing. Prints the number of operations.
  "cli-writer": { args in
    guard args.count == 2, let seconds = Double(args[1]) else { return 64 }
    let cache = try SharedCache<[UInt8]>(path: args[0], capacity: 4 << 20)
    var rng = SystemRandomNumberGenerator()
    let end = Date().addingTimeInterval(seconds)
    var ops = 0
    while Date() < end {
      for _ in 0..<64 {
        let key = "w\(Int.random(in: 0..<5000, using: &rng))"
        switch Int.random(in: 0..<10, using: &rng) {
        case 0: try cache.removeObject(forKey: key)
        case 1...3: _ = try cache.object(forKey: key)
        case 4:
          try cache.setObject(
            [UInt8](repeating: 7, count: Int.random(in: 1...3000, using: &rng)),
            forKey: key, expires: .seconds(Double.random(in: 0.01...1, using: &rng)))
        default: try cache.setObject([UInt8](repeating: 9, count: Int.random(in: 1...3000, using: &rng)), forKey: key)
        }
        ops += 1
      }
    }
    print(ops)
    return 0
  }
]
