import Foundation
import MappedCache

// Child-process commands for the core multi-process tests.
let coreCommands: [String: ([String]) throws -> Int32] = [
  "ping": { _ in print("pong"); return 0 },
]
