// libFuzzer target (d): the Redis tier's RESP parser (`Sources/MappedCacheRedis/RESP.swift`,
// compiled into this target) on an arbitrary byte stream. Built by scripts/fuzz-guided.sh;
// see docs/fuzzing.md.
//
// The input's first byte seeds how the rest is split into appends. Oracle: parsing never
// traps and allocates within the limits, whatever the bytes; the values (and the error, if
// any) are the same however the stream is split (fed whole, or in the input's pieces);
// and every value parsed, encoded again, parses back to the same encoding.
import MappedCache

/// Low limits, so that the fuzzer reaches them with short inputs.
let limits = RESPLimits(
  maxDepth: 8, maxAggregateCount: 64, maxBulkLength: 2048, maxLineLength: 512,
  maxReplyElements: 512, maxReplyBytes: 0)

/// Every value the parser yields from `pieces`, fed in order, and whether it then threw.
func parse(_ pieces: [ArraySlice<UInt8>], limits: RESPLimits = limits) -> (values: [RESPValue], failed: Bool) {
  var p = RESPParser(limits: limits)
  var out: [RESPValue] = []
  for piece in pieces {
    p.append(piece)
    do {
      while let v = try p.next() { out.append(v) }
    } catch {
      return (out, true)
    }
  }
  return (out, false)
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
  guard count > 0 else { return 0 }
  let bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
  let stream = bytes[1...]
  // Pieces of 1 to 16 bytes, their sizes drawn from a generator seeded by the first byte.
  var pieces: [ArraySlice<UInt8>] = []
  var state = UInt64(bytes[0]) &* 0x9E37_79B9_7F4A_7C15 | 1
  var at = stream.startIndex
  while at < stream.endIndex {
    state ^= state << 13
    state ^= state >> 7
    state ^= state << 17
    let n = min(Int(state % 16) + 1, stream.endIndex - at)
    pieces.append(stream[at..<(at + n)])
    at += n
  }
  let whole = parse([stream])
  let split = parse(pieces)
  // Compared by encoding: a NaN double is not equal to itself.
  if whole.values.map({ $0.encoded() }) != split.values.map({ $0.encoded() }) || whole.failed != split.failed {
    fatalError("the split changed the result: \(whole) against \(split)")
  }
  for v in whole.values {
    let encoded = v.encoded()
    // Default limits: text that was not UTF-8 is kept as replacement characters (3 bytes
    // each), so the encoding may pass the low limits the stream was parsed with.
    let again = parse([encoded[...]], limits: RESPLimits())
    guard !again.failed, again.values.count == 1, again.values[0].encoded() == encoded else {
      fatalError("\(v) encodes to bytes that do not parse back to it")
    }
  }
  return 0
}
