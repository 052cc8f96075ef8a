// Child-process commands for the mapped-cache CLI tests (issue 5).
let cliCommands: [String: HelperCommand] = [:]
