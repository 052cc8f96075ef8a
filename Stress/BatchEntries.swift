import MappedCache

/// The keys and values of one batch (`copyBytes(forKeys:into:lengths:)` takes the keys,
/// `setBytes(_:forKeys:expires:)` both): up to `capacity` entries, each key formatted in
/// place by `KeySet.write` and each value by `ValueFormat.write`, with the buffer views
/// the batch calls take. Made once and reused, so a batch allocates nothing; `release()`
/// frees it.
struct BatchEntries {
  let capacity: Int
  private let keySize: Int
  private let keyStride: Int
  private let valueMax: Int
  private let valueStride: Int
  private let keyBytes: UnsafeMutableRawBufferPointer
  private let valueBytes: UnsafeMutableRawBufferPointer
  /// Entry `j`'s key, `keySize` bytes at `keyBytes + j · keyStride` (fixed: the size is).
  private let keyViews: UnsafeMutableBufferPointer<UnsafeRawBufferPointer>
  /// Entry `j`'s value, as `value(_:size:)` last sized it.
  private let valueViews: UnsafeMutableBufferPointer<UnsafeRawBufferPointer>

  init(capacity: Int, keySize: Int, valueMax: Int) {
    self.capacity = capacity
    self.keySize = keySize
    self.valueMax = valueMax
    // `KeySet.write` stores 16 bytes whatever the key's size; keys and values 16-byte aligned.
    keyStride = (max(keySize, 16) + 15) & ~15
    valueStride = (valueMax + 15) & ~15
    keyBytes = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity * keyStride, alignment: 16)
    valueBytes = UnsafeMutableRawBufferPointer.allocate(byteCount: max(capacity * valueStride, 1), alignment: 16)
    keyViews = UnsafeMutableBufferPointer.allocate(capacity: capacity)
    valueViews = UnsafeMutableBufferPointer.allocate(capacity: capacity)
    for j in 0..<capacity {
      keyViews[j] = UnsafeRawBufferPointer(start: keyBytes.baseAddress! + j * keyStride, count: keySize)
    }
    valueViews.initialize(repeating: UnsafeRawBufferPointer(start: nil, count: 0))
  }

  func release() {
    keyBytes.deallocate()
    valueBytes.deallocate()
    keyViews.deallocate()
    valueViews.deallocate()
  }

  /// Makes entry `j`'s key key `k` of `keys`. Precondition: `j < capacity`, `keys.size == keySize`.
  @inline(__always)
  func setKey(_ j: Int, _ k: Int, of keys: KeySet) {
    keys.write(k, to: keyBytes.baseAddress! + j &* keyStride)
  }

  /// Entry `j`'s value, `size` bytes (at most `valueMax`) for the caller to write; the
  /// batch write stores exactly these bytes.
  @inline(__always)
  func value(_ j: Int, size: Int) -> UnsafeMutableRawBufferPointer {
    precondition(size <= valueMax, "value larger than the batch's values")
    let v = UnsafeMutableRawBufferPointer(start: valueBytes.baseAddress! + j &* valueStride, count: size)
    valueViews[j] = UnsafeRawBufferPointer(v)
    return v
  }

  /// The first `count` entries' keys.
  @inline(__always)
  func keys(_ count: Int) -> UnsafeBufferPointer<UnsafeRawBufferPointer> {
    UnsafeBufferPointer(rebasing: keyViews[..<count])
  }

  /// The first `count` entries' values.
  @inline(__always)
  func values(_ count: Int) -> UnsafeBufferPointer<UnsafeRawBufferPointer> {
    UnsafeBufferPointer(rebasing: valueViews[..<count])
  }
}
