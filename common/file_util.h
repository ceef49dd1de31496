// Whole files and durable writes: reading a file into a string, writing one so that a crash
// leaves either the old content or the new (temporary file, fsync, rename, fsync of the
// directory), and fsync of a directory after entries in it changed.
//
// Errors name the path: NOT_FOUND for a missing file, INTERNAL with the system's reason for the
// rest (a full disk, a read-only directory).
#pragma once

#include <string>

#include "common/status.h"

namespace fullband {

StatusOr<std::string> ReadFileToString(const std::string& path);

// `path`'s new content, durable when this returns OK.
Status WriteFileDurably(const std::string& path, const std::string& content);

// Makes the directory's entries (creations, renames, removals) durable.
Status FsyncDirectory(const std::string& path);

// The directory part of `path` ("." when it has none).
std::string ParentDirectory(const std::string& path);

}  // namespace fullband
