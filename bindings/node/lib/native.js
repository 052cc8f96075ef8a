"use strict";
// The compiled addon (build/Release/mappedcache.node), set up with the error class it throws:
// functions that take a cache handle (native.open's) first; lib/cache.js is the API.
const native = require("../build/Release/mappedcache.node");
const { CacheError } = require("./errors");

native.setup(CacheError);
module.exports = native;
