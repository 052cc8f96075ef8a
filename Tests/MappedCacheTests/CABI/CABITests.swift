import Foundation
import Glibc
import TestSupport
import Testing

/// libmappedcache.so's C ABI, used from C: Tests/CABI/abi_test.c, built here with cc
/// against the library and mappedcache.h, calls every function of the header, with bad
/// arguments (NULL pointers, impossible lengths, closed and forged handles) that must give
/// error codes and never crash, threads, get-or-compute claims, and fork() (a child writes
/// with its own lock token, is killed holding the lock, and never blocks the parent).
@Suite struct CABITests {
  static let repository = TestFiles.repository

  /// The C compiler: `MC_TEST_CC` where set, else `cc`, else the toolchain's clang.
  static let compiler: String? =
    ([ProcessInfo.processInfo.environment["MC_TEST_CC"]].compactMap { $0 }
    + ["/usr/bin/cc", "/usr/local/bin/cc", "/usr/bin/clang", "/opt/swift/usr/bin/clang"])
    .first { FileManager.default.isExecutableFile(atPath: $0) }

  /// `MC_TEST_CFLAGS`, split at spaces: what a program needs to link a library built with
  /// a sanitizer (`scripts/sanitizers.sh` sets both: the toolchain's clang, whose
  /// sanitizer runtime is the one the library was instrumented for).
  static let extraFlags: [String] =
    (ProcessInfo.processInfo.environment["MC_TEST_CFLAGS"] ?? "").split(separator: " ").map(String.init)

  /// Builds the C program Tests/CABI/`name`.c against libmappedcache.so and its header
  /// (`flags` added: options, and libraries after the source) as a file under /tmp, and
  /// returns its path, which the caller removes.
  static func buildProgram(_ name: String, flags: [String] = []) throws -> String {
    let library = TestFiles.binDir + "/libmappedcache.so"
    try #require(FileManager.default.fileExists(atPath: library), "\(library) is not built (swift build builds it)")
    let cc = try #require(compiler, "no C compiler (cc or clang) on this machine")
    let program = "/tmp/mc-\(name)-\(getpid())"
    let compile = try ChildProcess.run(
      cc,
      [
        "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1",
        "-I", repository + "/Sources/CMappedCacheABI/include", repository + "/Tests/CABI/\(name).c",
        "-L", TestFiles.binDir, "-lmappedcache", "-Wl,-rpath," + TestFiles.binDir, "-o", program,
      ] + flags + extraFlags)
    try #require(compile.status == 0, "cc failed: \(compile.stderr)")
    return program
  }

  @Test func cProgramCallsEveryFunctionWithGoodAndBadArguments() throws {
    let program = try Self.buildProgram("abi_test", flags: ["-pthread", "-lm"])
    defer { unlink(program) }
    let prefix = "/dev/shm/mctest-cabi-\(getpid())"
    let r = try ChildProcess.run(program, [prefix], timeout: 180)
    #expect(!r.signaled, "abi_test died by signal \(r.status): \(r.stderr)")
    #expect(r.status == 0, "abi_test failed: \(r.stderr)\(r.stdout)")
    let summary = try #require(r.stdout.split(separator: "\n").last.map(String.init))
    #expect(summary.hasSuffix(", 0 failed"), "\(summary)")
    let checks = Int(summary.split(separator: " ")[1]) ?? 0
    #expect(checks > 250, "\(summary)")
  }

  /// The header compiles on its own, as C and (where a C++ compiler is installed) as C++.
  @Test func headerStandsAlone() throws {
    let cc = try #require(Self.compiler, "no C compiler (cc or clang) on this machine")
    let header = Self.repository + "/Sources/CMappedCacheABI/include/mappedcache.h"
    for language in ["c", "c++"] where language == "c" || FileManager.default.isExecutableFile(atPath: "/usr/bin/c++") {
      let r = try ChildProcess.run(
        language == "c" ? cc : "/usr/bin/c++",
        ["-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-x", language == "c" ? "c" : "c++", header])
      #expect(r.status == 0, "\(language): \(r.stderr)")
    }
  }
}
