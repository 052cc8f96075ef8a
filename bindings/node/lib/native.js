"use strict";
// The compiled addon (build/Release/mappedcache.node), set up with the error class it throws.
const native = require("../build/Release/mappedcache.node");
const { CacheError } = require("./errors");

native.setup(CacheError);
module.exports = native;
