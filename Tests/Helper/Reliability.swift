// Child-process commands for the reliability tests (issue 6).
let reliabilityCommands: [String: HelperCommand] = [:]
