import Foundation
import TestSupport
import Testing

@testable import MappedCache

/// `get`, `set` and `dump --values` by the file's value type: a value reads back in every
/// tool as it was given (bindings/python/tests/test_matrix.py runs the same across the CLI,
/// Swift and Python).
extension CLITests {
  @Test func anInt64FileTakesAndShowsDecimal() throws {
    let path = try Self.freshCache("int64", ["--type", "int64"])
    defer { TestFiles.cleanup(path) }
    #expect(try Self.cli(["set", path, "n", "41"]).status == 0)
    let counter = try SharedCache<Int>(path: path)
    #expect(try counter.object(forKey: "n") == 41)
    #expect(try counter.increment(forKey: "n") == 42)
    #expect(try Self.cli(["get", path, "n"]).text == "42")
    let refused = try Self.cli(["set", path, "n", "forty-three"])
    #expect(refused.status == 3 && refused.err.contains("int64"))
    #expect(try counter.object(forKey: "n") == 42)
  }

  @Test func aStringFileRefusesBytesThatAreNotUTF8() throws {
    let path = try Self.freshCache("string", ["--type", "string"])
    defer { TestFiles.cleanup(path) }
    #expect(try Self.cli(["set", path, "k", "héllo"]).status == 0)
    #expect(try SharedCache<String>(path: path).object(forKey: "k") == "héllo")
    let refused = try Self.cli(["set", path, "bad", "-"], stdin: Data([0xff]))
    #expect(refused.status == 3 && refused.err.contains("UTF-8"))
    #expect(try Self.cli(["get", path, "bad"]).status == 1)
  }

  @Test func aPythonFilesValuesLoseTheirTagInTheCLI() throws {
    let path = TestFiles.tempPath("python-values")
    defer { TestFiles.cleanup(path) }
    var options = CacheOptions()
    options.capacity = 4 << 20
    let file = try CacheFile(creating: path, options: options, typeName: "python")
    var minusTwoAndAHalf: [UInt8] = Array("F".utf8)
    withUnsafeBytes(of: (-2.5).bitPattern.littleEndian) { minusTwoAndAHalf += $0 }
    let stored: [(String, [UInt8], String)] = [
      ("str", Array("Sv".utf8), "v"), ("int", Array("I-42".utf8), "-42"), ("float", minusTwoAndAHalf, "-2.5"),
    ]
    for (key, value, _) in stored { try file.set(Array(key.utf8), value) }
    for (key, _, shown) in stored { #expect(try Self.cli(["get", path, key]).text == shown, "\(key)") }
    let dump = try #require(try Self.json(try Self.cli(["dump", path, "--json", "--values"])) as? [[String: Any]])
    #expect(Set(dump.compactMap { $0["value"] as? String }) == ["v", "-42", "-2.5"])
    // The CLI's text is a str to Python, other bytes are bytes.
    #expect(try Self.cli(["set", path, "text", "héllo"]).status == 0)
    #expect(try Self.cli(["set", path, "binary", "-"], stdin: Data([0xff, 0])).status == 0)
    #expect(try file.get(Array("text".utf8))?.value == Array("Shéllo".utf8))
    #expect(try file.get(Array("binary".utf8))?.value == [UInt8(ascii: "B"), 0xff, 0])
    try file.set(Array("pickle".utf8), [UInt8(ascii: "P"), 0x80, 5])
    let pickle = try Self.cli(["get", path, "pickle"])
    #expect(pickle.status == 3 && pickle.err.contains("pickle"))
  }
}
