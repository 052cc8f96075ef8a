{
  "targets": [
    {
      "target_name": "mappedcache",
      "sources": ["src/mappedcache.c"],
      "include_dirs": ["<!(node paths.js include)"],
      "cflags": ["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "libraries": [
        "-L<!(node paths.js lib)",
        "-lmappedcache",
        "-Wl,-rpath,<!(node paths.js lib)",
      ],
    }
  ]
}
