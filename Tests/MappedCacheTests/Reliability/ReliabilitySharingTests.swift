import Foundation
import Glibc
import TestSupport
import Testing

@testable import MappedCache

/// A cache shared by two real non-root users of one group (a "web" user and a "job"
/// user, made for the test with groupadd/useradd and run with setpriv): `mapped-cache
/// create --group` and `OpenPolicy.sharedWithGroup`, and what stays refused (a user
/// outside the group, a file others may write, a file of another group). Needs root;
/// skipped with a reason otherwise (the policy's own test runs as any user).
@Suite(.serialized) struct ReliabilitySharingTests {
  /// Temporary accounts: a group and three users (two members, one not), removed at the end.
  final class Accounts {
    let group: String, web: String, job: String, outsider: String
    var gid: gid_t = 0
    private var made: [String] = []
    private var groupMade = false

    init?() {
      let tag = String(getpid() % 100_000)
      group = "mcg\(tag)"
      web = "mcweb\(tag)"
      job = "mcjob\(tag)"
      outsider = "mcout\(tag)"
      let tools: [String] = [
        "/usr/sbin/groupadd", "/usr/sbin/useradd", "/usr/sbin/userdel", "/usr/sbin/groupdel",
        "/usr/bin/setpriv",
      ]
      guard getuid() == 0, tools.allSatisfy({ access($0, X_OK) == 0 }) else { return nil }
      guard Self.sh("/usr/sbin/groupadd", [group]) else { return nil }
      groupMade = true
      for (user, member) in [(web, true), (job, true), (outsider, false)] {
        let args = ["-M", "-U", "-s", "/usr/sbin/nologin"] + (member ? ["-G", group] : []) + [user]
        guard Self.sh("/usr/sbin/useradd", args) else { return nil }
        made.append(user)
      }
      guard let g = getgrnam(group) else { return nil }
      gid = g.pointee.gr_gid
    }

    deinit {
      for u in made { _ = Self.sh("/usr/sbin/userdel", [u]) }
      if groupMade { _ = Self.sh("/usr/sbin/groupdel", [group]) }
    }

    func uid(_ user: String) -> uid_t { getpwnam(user)?.pointee.pw_uid ?? 0 }

    /// Runs `binary args` as `user` (its own primary group, and its supplementary groups).
    func run(as user: String, _ binary: String, _ args: [String]) throws -> ChildProcess.Result {
      try ChildProcess.run(
        "/usr/bin/setpriv", ["--reuid=\(user)", "--regid=\(user)", "--init-groups", binary] + args,
        timeout: 60)
    }

    static func sh(_ tool: String, _ args: [String]) -> Bool {
      (try? ChildProcess.run(tool, args, timeout: 30))?.status == 0
    }
  }

  static let tool = TestFiles.binary("mapped-cache")

  /// The policy alone, as any user: a group-writable file of the named group opens, one
  /// of another group or writable by others does not, an unknown group is an error.
  @Test func sharedGroupPolicyAcceptsOnlyThatGroup() throws {
    let path = TestFiles.tempPath("grp-policy")
    defer { TestFiles.cleanup(path) }
    do { try SharedCache<[UInt8]>(path: path, capacity: 1 << 20).setObject([1], forKey: "k") }
    #expect(chmod(path, 0o660) == 0)
    var st = stat()
    #expect(stat(path, &st) == 0)
    let own = try #require(
      getgrgid(st.st_gid).map { String(cString: $0.pointee.gr_name) }, "the file's group has a name")
    func refusal(_ policy: OpenPolicy) -> String? {
      do {
        _ = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, policy: policy)
        return nil
      } catch {
        if case CacheError.unsafeFile(_, let why) = error { return why }
        return "\(error)"
      }
    }
    #expect(refusal(OpenPolicy())?.contains("its group can write it") == true)
    #expect(refusal(.sharedWithGroup(own)) == nil)
    #expect(try SharedCache<[UInt8]>(path: path, policy: .sharedWithGroup(own)).object(forKey: "k") == [1])
    #expect(refusal(.sharedWithGroup("\(st.st_gid)")) == nil, "a numeric group ID names the group too")
    // Another group that exists (nogroup, or whichever group 65534 is).
    if let other = getgrgid(65534).map({ String(cString: $0.pointee.gr_name) }), st.st_gid != 65534 {
      #expect(refusal(.sharedWithGroup(other))?.contains("not to the shared group \(other)") == true)
    }
    let unknown = "no-such-group-\(getpid())"
    #expect(throws: CacheError.invalidArgument("there is no group named '\(unknown)' (OpenPolicy.sharedGroup)")) {
      _ = try SharedCache<[UInt8]>(path: path, policy: .sharedWithGroup(unknown))
    }
    #expect(chmod(path, 0o662) == 0)
    #expect(refusal(.sharedWithGroup(own))?.contains("others can write it") == true)
    #expect(chmod(path, 0o600) == 0)
    #expect(refusal(.sharedWithGroup(own)) == nil, "a private file of this user opens as before")
  }

  @Test func twoUsersOfOneGroupShareACache() throws {
    guard let accounts = Accounts() else {
      print("sharing across users: needs root, groupadd/useradd and setpriv; skipped")
      return
    }
    guard let ping = try? accounts.run(as: accounts.web, RelSupport.helper, ["ping"]), ping.stdout == "pong\n" else {
      print("sharing across users: the test binaries are not runnable by another user here; skipped")
      return
    }
    let g = accounts.group
    let web = accounts.web
    let job = accounts.job
    let path = TestFiles.tempPath("shared")
    defer { TestFiles.cleanup(path) }
    // Each user stores under its role's name: "web", "job" or "other".
    func probe(_ user: String, _ group: String, _ file: String = path) throws -> [String: String] {
      let key = user == web ? "web" : user == job ? "job" : "other"
      return RelSupport.fields(try accounts.run(as: user, RelSupport.helper, ["group-probe", file, group, key]).stdout)
    }
    func fileStat(_ p: String) -> stat {
      var st = stat()
      _ = stat(p, &st)
      return st
    }

    // The web user creates the file for the group: 0660 by default, the group's.
    let created = try accounts.run(as: web, Self.tool, ["create", path, "--capacity", "2M", "--group", g])
    #expect(created.status == 0 && created.stdout.contains("shared with group \(g)"), "\(created.stderr)")
    var st = fileStat(path)
    #expect(st.st_uid == accounts.uid(web) && st.st_gid == accounts.gid && st.st_mode & 0o777 == 0o660)

    // Both members open it through the library for writing and see each other's entries.
    let w = try probe(web, g)
    #expect(w["open"] == "ok" && w["writable"] == "true" && w["set"] == "ok", "\(w)")
    let j = try probe(job, g)
    #expect(j["open"] == "ok" && j["writable"] == "true" && j["set"] == "ok", "\(j)")
    #expect(j["seen"] == "web=by-\(accounts.uid(web)),job=by-\(accounts.uid(job))", "\(j)")
    // The default policy still refuses the other user's file.
    #expect(try probe(job, "-")["open"] == "unsafeFile")

    // The tool's writing commands accept a file of one of the caller's groups.
    #expect(try accounts.run(as: job, Self.tool, ["set", path, "tool", "from-job"]).status == 0)
    #expect(try accounts.run(as: web, Self.tool, ["get", path, "tool"]).stdout == "from-job")
    #expect(try accounts.run(as: web, Self.tool, ["verify", path]).status == 0)

    // Outside the group: the file is unreadable (0660), and creating for the group is refused.
    #expect(try probe(accounts.outsider, g)["open"] != "ok")
    let p2 = TestFiles.tempPath("shared-refused")
    defer { TestFiles.cleanup(p2) }
    let refused = try accounts.run(as: accounts.outsider, Self.tool, ["create", p2, "--group", g])
    #expect(refused.status == 3 && refused.stderr.contains("only its members"), "\(refused.stderr)")
    #expect(access(p2, F_OK) != 0, "a refused creation leaves no file")
    #expect(try accounts.run(as: web, Self.tool, ["create", p2, "--group", "no-such-group-\(getpid())"]).status == 64)

    // What stays refused for a member: a file others may write, a group-writable file of another group.
    #expect(chmod(path, 0o666) == 0)
    #expect(try probe(job, g)["open"] == "unsafeFile")
    #expect(try accounts.run(as: job, Self.tool, ["set", path, "k", "v"]).status == 3)
    // (0664: readable by others, so that the job user gets as far as the policy's check.)
    #expect(chmod(path, 0o664) == 0)
    #expect(chown(path, uid_t.max, getgrnam(web)!.pointee.gr_gid) == 0)  // the web user's own group
    #expect(try probe(job, g)["open"] == "unsafeFile")
    #expect(chown(path, uid_t.max, accounts.gid) == 0 && chmod(path, 0o660) == 0)
    #expect(try probe(job, g)["open"] == "ok")

    // The library creates a file for the group itself: the group's, group read-write.
    let p3 = TestFiles.tempPath("shared-lib")
    defer { TestFiles.cleanup(p3) }
    let made = try probe(job, g, p3)
    #expect(made["open"] == "ok" && made["set"] == "ok", "\(made)")
    st = fileStat(p3)
    #expect(st.st_uid == accounts.uid(job) && st.st_gid == accounts.gid && st.st_mode & 0o777 == 0o660)
    #expect(try probe(web, g, p3)["seen"] == "web=by-\(accounts.uid(web)),job=by-\(accounts.uid(job))")
  }
}
