// Child-process commands for the typed-API tests (issue 4).
let typedCommands: [String: HelperCommand] = [:]
