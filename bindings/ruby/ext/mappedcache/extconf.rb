# frozen_string_literal: true

# Builds mappedcache_ext over libmappedcache.so (MappedCache's C ABI). The library comes
# from, in order:
#   1. MAPPEDCACHE_LIB_DIR: a directory holding a built libmappedcache.so (a checkout's
#      .build/release or .build/debug after `swift build`), with mappedcache.h in
#      MAPPEDCACHE_INCLUDE_DIR, else beside it or in ../include, else the gem's copy;
#   2. MAPPEDCACHE_SOURCE_DIR, or the checkout this gem was built from when it is still
#      there: built with `swift build -c release --product mappedcache`
#      (MAPPEDCACHE_SWIFT_CONFIG=debug for a debug build);
#   3. the system's library directories (/usr/local/lib, /usr/lib, ...).
# The library is installed beside the extension, which finds it there (its run path is
# $ORIGIN), so the installed gem needs neither the checkout nor these variables.
require "mkmf"
require "fileutils"
require "open3"

HERE = __dir__
GEM_HEADER_DIR = File.join(HERE, "include")

def fail_build(message)
  abort <<~TEXT
    mappedcache: #{message}
    Point the build at a built libmappedcache.so, for example:
      gem install mappedcache -- --with-mappedcache-dir=DIR   (DIR/lib, DIR/include)
      MAPPEDCACHE_LIB_DIR=/path/to/MappedCache/.build/release gem install mappedcache
    or at a MappedCache checkout to build it with Swift:
      MAPPEDCACHE_SOURCE_DIR=/path/to/MappedCache gem install mappedcache
  TEXT
end

def header_dir_for(lib_dir)
  given = ENV["MAPPEDCACHE_INCLUDE_DIR"]
  candidates = [given, lib_dir, File.join(lib_dir, "..", "include"), GEM_HEADER_DIR].compact
  candidates.find { |d| File.exist?(File.join(d, "mappedcache.h")) } ||
    fail_build("no mappedcache.h in #{candidates.join(', ')} (set MAPPEDCACHE_INCLUDE_DIR)")
end

def checkout
  given = ENV["MAPPEDCACHE_SOURCE_DIR"]
  recorded = File.join(HERE, "checkout.txt")
  dir = given || (File.read(recorded).strip if File.exist?(recorded))
  return nil unless dir
  return File.expand_path(dir) if File.exist?(File.join(dir, "Package.swift"))
  fail_build("MAPPEDCACHE_SOURCE_DIR=#{dir} is no MappedCache checkout (no Package.swift)") if given
  nil
end

def build_with_swift(root)
  config = ENV.fetch("MAPPEDCACHE_SWIFT_CONFIG", "release")
  command = ["swift", "build", "-c", config, "--product", "mappedcache", "--package-path", root]
  puts "mappedcache: building the library: #{command.join(' ')}"
  system(*command) || fail_build("`#{command.join(' ')}` failed")
  out, status = Open3.capture2("swift", "build", "-c", config, "--show-bin-path", "--package-path", root)
  fail_build("swift build --show-bin-path failed") unless status.success?
  [out.strip, File.join(root, "Sources", "CMappedCacheABI", "include")]
end

def locate
  if (given = ENV["MAPPEDCACHE_LIB_DIR"])
    dir = File.expand_path(given)
    unless File.exist?(File.join(dir, "libmappedcache.so"))
      fail_build("MAPPEDCACHE_LIB_DIR=#{given} holds no libmappedcache.so")
    end
    return [dir, header_dir_for(dir)]
  end
  inc, lib = dir_config("mappedcache")
  return [lib, inc || header_dir_for(lib)] if lib && File.exist?(File.join(lib, "libmappedcache.so"))
  root = checkout
  return build_with_swift(root) if root
  system_dir = %w[/usr/local/lib /usr/lib /usr/lib64 /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu]
               .find { |d| File.exist?(File.join(d, "libmappedcache.so")) }
  return [system_dir, header_dir_for(system_dir)] if system_dir
  fail_build("no libmappedcache.so found (MAPPEDCACHE_LIB_DIR is not set, no checkout, " \
             "none in the system's library directories)")
end

lib_dir, include_dir = locate
puts "mappedcache: libmappedcache.so from #{lib_dir}, mappedcache.h from #{include_dir}"
# The library ships beside the extension (its run path is $ORIGIN).
FileUtils.cp(File.join(lib_dir, "libmappedcache.so"), "libmappedcache.so")
$INCFLAGS << " -I#{include_dir}"
$LDFLAGS << " -L. -Wl,-rpath,'$$ORIGIN'"
$CFLAGS << " -O2 -std=c11 -Wall -Wno-missing-field-initializers"
have_header("mappedcache.h") || fail_build("mappedcache.h in #{include_dir} does not compile")
have_library("mappedcache", "mc_open", "mappedcache.h") ||
  fail_build("#{lib_dir}/libmappedcache.so does not link (see mkmf.log); is the Swift runtime it needs installed?")
create_makefile("mappedcache/mappedcache_ext")

# `make install` installs the library beside the extension.
File.open("Makefile", "a") do |f|
  f.puts <<~MAKE
    install-so: $(RUBYARCHDIR)/libmappedcache.so
    $(RUBYARCHDIR)/libmappedcache.so: libmappedcache.so $(TIMESTAMP_DIR)/.sitearchdir.-.mappedcache.time
    \t$(INSTALL_PROG) libmappedcache.so $(RUBYARCHDIR)
  MAKE
end
