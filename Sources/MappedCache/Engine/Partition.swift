/// One partition's layers, wired together for one operation: its memory, index, logs,
/// counters, index resizer and eviction. A value of a few words, made where it is needed
/// (`CacheEngine.partition(_:)`), holding nothing that outlives the mapping.
///
/// The layers are made on each use, not stored: each holds its own copy of the
/// partition's memory view, and a `Partition` storing all six was a kilobyte of copies
/// that every write built before it took the lock. Made on use and inlined, only the
/// words a write touches are ever formed.
struct Partition {
  let memory: PartitionMemory
  /// The file the partition is of.
  let file: MappedMemory

  @inline(__always)
  init(_ p: Int, file: MappedMemory) {
    memory = file.partition(p)
    self.file = file
  }

  /// The layers of the partition whose memory view the caller made already (the
  /// straight set's: made again, the view lengthened the set and the increment,
  /// `scripts/callgrind.sh`).
  @inline(__always)
  init(_ memory: PartitionMemory, file: MappedMemory) {
    self.memory = memory
    self.file = file
  }

  @inline(__always) var index: BucketIndex { BucketIndex(part: memory) }
  @inline(__always) var logs: RecordLogs { RecordLogs(part: memory) }
  @inline(__always) var freeLists: FreeLists { FreeLists(part: memory, logs: logs) }
  @inline(__always) var counters: PartitionCounters { PartitionCounters(part: memory, memory: file) }
  @inline(__always) var resizer: IndexResizer { IndexResizer(logs: logs, file: file) }
  @inline(__always) var policy: EvictionPolicy { EvictionPolicy(resizer: resizer) }

  /// The partition's number.
  @inline(__always) var number: Int { memory.index }

  /// Whether W1 must repair before a change: the last holder died mid-change (the intent
  /// word is set), or the geometry or (with `checkingLogs`) the log positions are out of
  /// range. Asked under the lock by every writer, by growth, and by a read that took a
  /// dead holder's word (R7).
  @inline(__always)
  func needsRepair(checkingLogs: Bool = true) -> Bool {
    memory.word(.intent).load(.relaxed) != 0 || !geometryIsSane || (checkingLogs && !logs.areSane)
  }

  /// Whether the group count is in range and the index starts at or above the main
  /// log's limit: what a writer needs before it computes a bucket's address from the
  /// geometry (checked under the lock, W1; a damaged word sends the writer to repair).
  @inline(__always)
  var geometryIsSane: Bool {
    let groups = index.groups
    guard memory.isValidGroupCount(groups) else { return false }
    return indexClearsLogs(groups: groups)
  }

  /// `geometryIsSane`'s second half, for a group count already found in range
  /// (`isValidGroupCount`): whether an index of `groups` groups starts at or above the
  /// main log's limit.
  @inline(__always)
  func indexClearsLogs(groups: Int) -> Bool {
    assert(memory.isValidGroupCount(groups))
    // The index's first byte is its last group's (the view's own copy of the
    // partition's size, not the shared limits': a load less on the set's way).
    return logs.mainLimit <= memory.groupOffset(groups &- 1)
  }
}
