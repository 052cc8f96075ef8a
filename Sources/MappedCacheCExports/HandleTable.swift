import CMappedCacheABI
import Synchronization

/// The handles given to C callers, checked like file descriptors: a handle is a number,
/// never a pointer to dereference, so a stale, forged or foreign handle is an error code
/// rather than a crash.
///
///     bit 63    60 59                          32 31                            0
///        | kind |   generation (28 bits, ≠ 0)  |             slot               |
///
/// A slot's generation changes each time the slot is reused, so a handle kept past
/// `remove` names no live object (until the same slot has been reused 2^28 times).
/// A lookup is one masked index and one compare: each slot keeps the whole handle of its
/// live object, so a handle of another kind, generation or slot (one whose slot field
/// is past the table, masked onto a slot in it) differs from what the slot keeps. A free
/// slot keeps `freeMark(slot)`, which no handle that indexes the slot equals.
/// Lookups take no lock: a slot's object is written before its handle is published
/// (release) and read after the handle is checked (acquire). Inserting and removing
/// take the tables lock (`mc_abi_tables_lock`, held across fork() by the atfork handlers).
/// Invariant: `live[slot]` is a handle exactly when `objects[slot]` holds a retained object.
final class HandleTable<Object: AnyObject>: @unchecked Sendable {
  private let kind: UInt
  private let capacity: Int
  /// `capacity - 1` (a power of two's): a handle's slot, masked.
  private let mask: UInt
  /// The handle of each slot's live object, or `freeMark(slot)` for a free slot.
  private let live: UnsafeMutablePointer<Atomic<UInt>>
  /// The generation each slot had last (the next use takes the one after it).
  private let lastGeneration: UnsafeMutablePointer<UInt32>
  private let objects: UnsafeMutablePointer<Unmanaged<Object>?>
  /// Slots freed and not yet reused, and how many slots were ever used (guarded by the
  /// tables lock).
  private var freeSlots: [Int] = []
  private var used = 0

  init(kind: UInt, capacity: Int) {
    precondition(capacity > 0 && capacity & (capacity - 1) == 0 && capacity <= 1 << 32)
    self.kind = kind
    self.capacity = capacity
    mask = UInt(capacity - 1)
    live = .allocate(capacity: capacity)
    for i in 0..<capacity { (live + i).initialize(to: Atomic(HandleTable.freeMark(i))) }
    lastGeneration = .allocate(capacity: capacity)
    lastGeneration.initialize(repeating: 0, count: capacity)
    objects = .allocate(capacity: capacity)
    objects.initialize(repeating: nil, count: capacity)
  }

  /// The live object a handle names, unretained (valid while the handle is not removed),
  /// or nil.
  @inline(__always)
  func object(_ handle: OpaquePointer?) -> Unmanaged<Object>? {
    let bits = UInt(bitPattern: handle)
    let slot = Int(truncatingIfNeeded: bits & mask)
    guard live[slot].load(ordering: .acquiring) == bits else { return nil }
    return objects[slot]
  }

  /// What a free slot keeps: its index complemented, whose slot bits differ from the
  /// slot's own (so no handle that the mask sends to this slot is equal to it).
  @inline(__always)
  private static func freeMark(_ slot: Int) -> UInt { ~UInt(slot) }

  /// Stores `object` (retained) in a free slot and returns its handle; nil when every
  /// slot is in use.
  func insert(_ object: Object) -> OpaquePointer? {
    mc_abi_tables_lock()
    defer { mc_abi_tables_unlock() }
    let slot: Int
    if let s = freeSlots.popLast() {
      slot = s
    } else if used < capacity {
      slot = used
      used += 1
    } else {
      return nil
    }
    var generation = (lastGeneration[slot] &+ 1) & 0x0FFF_FFFF
    if generation == 0 { generation = 1 }
    lastGeneration[slot] = generation
    objects[slot] = Unmanaged.passRetained(object)
    let handle = kind << 60 | UInt(generation) << 32 | UInt(slot)
    live[slot].store(handle, ordering: .releasing)
    return OpaquePointer(bitPattern: handle)
  }

  /// Takes the object out of the table; the caller owns the retain the table held. Nil
  /// when the handle names no live object.
  func remove(_ handle: OpaquePointer?) -> Unmanaged<Object>? {
    mc_abi_tables_lock()
    defer { mc_abi_tables_unlock() }
    guard let object = object(handle) else { return nil }
    let slot = Int(UInt(bitPattern: handle) & mask)
    live[slot].store(HandleTable.freeMark(slot), ordering: .releasing)
    objects[slot] = nil
    freeSlots.append(slot)
    return object
  }

  /// Calls `body` with every live object, under the tables lock.
  func forEachLive(_ body: (Object) -> Void) {
    mc_abi_tables_lock()
    defer { mc_abi_tables_unlock() }
    for slot in 0..<used where live[slot].load(ordering: .relaxed) != HandleTable.freeMark(slot) {
      if let object = objects[slot] { body(object.takeUnretainedValue()) }
    }
  }
}
