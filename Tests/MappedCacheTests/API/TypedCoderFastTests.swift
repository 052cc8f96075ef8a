import Foundation
import Testing

@testable import MappedCache

// The binary coder's straight-line forms for arrays (`BinaryCoder+Fast.swift`) write and
// read exactly the bytes of the general path. `ContiguousArray` has no straight-line
// form: it goes through an unkeyed container element by element, the general path.

@Suite struct TypedCoderFastTests {
  struct Wrapped<A: Codable & Equatable>: Codable, Equatable {
    var name: String
    var items: A
    var after: Int
  }

  func same<E: Codable & Equatable>(_ values: [E]) throws {
    let fast = try BinaryCoding.encode(values)
    let general = try BinaryCoding.encode(ContiguousArray(values))
    #expect(fast == general, "\(E.self) x\(values.count)")
    #expect(try BinaryCoding.decode([E].self, from: general) == values)
    #expect(try BinaryCoding.decode(ContiguousArray<E>.self, from: fast) == ContiguousArray(values))
    let wrapped = try BinaryCoding.encode(Wrapped(name: "w", items: values, after: 7))
    #expect(wrapped == (try BinaryCoding.encode(Wrapped(name: "w", items: ContiguousArray(values), after: 7))))
    #expect(try BinaryCoding.decode(Wrapped<[E]>.self, from: wrapped) == Wrapped(name: "w", items: values, after: 7))
  }

  @Test func arraysMatchTheGeneralPath() throws {
    try same([String]())
    try same(["red", "green", "", "ünïcödé ✓", String(repeating: "long", count: 40)])
    try same((0..<200).map { "s\($0)" })  // a count and a body past one varint byte
    try same([Int]())
    try same([0, -1, Int.max, Int.min, 42])
    try same((0..<150).map { $0 * 7 })
    try same([0.0, -2.5, Double.greatestFiniteMagnitude, .infinity])
    try same([true, false, true])
  }

  /// Malformed arrays throw (the same kinds of error as the general path), never trap.
  @Test func malformedArraysThrow() throws {
    let strings = try BinaryCoding.encode(["a", "b"])
    #expect(throws: DecodingError.self) { try BinaryCoding.decode([Int].self, from: strings) }
    #expect(throws: DecodingError.self) {
      try BinaryCoding.decode([String].self, from: try BinaryCoding.encode([1, 2]))
    }
    #expect(throws: DecodingError.self) { try BinaryCoding.decode([String].self, from: try BinaryCoding.encode("x")) }
    for cut in 1..<strings.count {
      #expect(throws: DecodingError.self) { try BinaryCoding.decode([String].self, from: Array(strings.prefix(cut))) }
    }
    // A count larger than the bytes present, and invalid UTF-8 in an element.
    var lying = strings
    lying[3] = 0x7F
    #expect(throws: DecodingError.self) { try BinaryCoding.decode([String].self, from: lying) }
    var badUTF8 = strings
    badUTF8[badUTF8.count - 1] = 0xFF
    #expect(throws: DecodingError.self) { try BinaryCoding.decode([String].self, from: badUTF8) }
    // A nil element is "value not found", as for the general path.
    var withNil = try BinaryCoding.encode([Int?.none, 1])
    #expect(throws: DecodingError.self) { try BinaryCoding.decode([Int].self, from: withNil) }
    withNil.removeAll()
  }
}
