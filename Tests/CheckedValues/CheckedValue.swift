/// Self-checking values: `key NUL writer NUL seq NUL payload checksum`, where the payload
/// is derived from the sequence number and the checksum (FNV-1a, 64 bits, little-endian)
/// covers every byte before it. A reader that gets a value for `key` accepts it only if
/// it names that key and its checksum matches: a torn, stale-slot or foreign value fails.
/// Shared by the helper processes that write such values and the tests that check them.
public enum CheckedValue {
  public static func fnv(_ b: UnsafeRawBufferPointer) -> UInt64 {
    var h: UInt64 = 0xCBF2_9CE4_8422_2325
    for x in b { h = (h ^ UInt64(x)) &* 0x100_0000_01B3 }
    return h
  }

  public static func make(key: String, writer: Int, seq: Int, size: Int) -> [UInt8] {
    var v = Array("\(key)\u{0}\(writer)\u{0}\(seq)\u{0}".utf8)
    let payload = max(0, size - v.count - 8)
    var x = UInt64(truncatingIfNeeded: seq) &* 0x9E37_79B9_7F4A_7C15 | 1
    for _ in 0..<payload {
      x ^= x << 13
      x ^= x >> 7
      x ^= x << 17
      v.append(UInt8(truncatingIfNeeded: x))
    }
    let sum = v.withUnsafeBytes { fnv($0) }
    for i in 0..<8 { v.append(UInt8(truncatingIfNeeded: sum >> (8 * UInt64(i)))) }
    return v
  }

  public static func check(_ v: UnsafeRawBufferPointer, key: String) -> Bool {
    let k = Array(key.utf8)
    guard v.count >= k.count + 1 + 8 else { return false }
    let body = UnsafeRawBufferPointer(rebasing: v[0..<(v.count - 8)])
    var sum: UInt64 = 0
    for i in 0..<8 { sum |= UInt64(v[v.count - 8 + i]) << (8 * UInt64(i)) }
    guard sum == fnv(body) else { return false }
    return v[k.count] == 0 && zip(k, v).allSatisfy { $0 == $1 }
  }
}

extension CheckedValue {
  public static func check(_ v: [UInt8], key: String) -> Bool { v.withUnsafeBytes { check($0, key: key) } }
}
