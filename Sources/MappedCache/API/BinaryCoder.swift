import Foundation

// Interim Codable coder (binary property lists); replaced by the compact coder.
enum BinaryEncoder {
  static func encode<T: Encodable>(_ v: T) throws -> [UInt8] {
    let e = PropertyListEncoder()
    e.outputFormat = .binary
    do { return Array(try e.encode([v])) } catch { throw CacheError.encodingFailed(reason: "\(error)") }
  }
}

enum BinaryDecoder {
  static func decode<T: Decodable>(_ t: T.Type, from b: UnsafeRawBufferPointer) throws -> T {
    let d = PropertyListDecoder()
    guard let v = try d.decode([T].self, from: Data(b)).first else {
      throw CacheDecodingError(description: "empty container")
    }
    return v
  }
}
