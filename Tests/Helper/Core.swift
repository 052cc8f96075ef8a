import Foundation
import MappedCache

// Child-process commands for the core multi-process tests.
let coreCommands: [String: HelperCommand] = [
  "ping": { _ in print("pong"); return 0 },
]
