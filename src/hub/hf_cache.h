// The Hugging Face cache, laid out as huggingface_hub writes it (file_download.py), so a model that
// `huggingface-cli download` or llama.cpp's -hf fetched is found here and the other way round:
//
//   CACHE/models--OWNER--NAME/blobs/OID                      the content (OID: the SHA-256 for LFS files)
//   CACHE/models--OWNER--NAME/blobs/OID.incomplete           a download in progress (resumed from its end)
//   CACHE/models--OWNER--NAME/snapshots/COMMIT/PATH          relative symlink to ../../blobs/OID
//   CACHE/models--OWNER--NAME/refs/main                      the commit `main` pointed at, no newline
//   CACHE/.locks/models--OWNER--NAME/OID.lock                flock(2)ed while one process downloads OID
//
// CACHE is $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub (huggingface_hub's constants.py; llama.cpp's common/hf-cache.cpp).
#pragma once

#include "hub/model_pick.h"

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace nitro::hub {

class RepoCache {
public:
    RepoCache(std::filesystem::path cache_dir, const std::string& repo);

    const std::filesystem::path& dir() const { return dir_; }
    std::filesystem::path blob(const std::string& oid) const;
    std::filesystem::path incomplete(const std::string& oid) const;
    std::filesystem::path snapshot(const std::string& commit, const std::string& file) const;
    std::filesystem::path lock_path(const std::string& oid) const;

    /// The commit refs/NAME holds ("" when there is none or it is not a 40-digit hex commit).
    std::string ref(const std::string& name = "main") const;
    /// Writes refs/NAME = commit (atomically: a temporary file renamed into place).
    void set_ref(const std::string& commit, const std::string& name = "main") const;
    /// snapshots/COMMIT/FILE -> the blob, as a relative symlink (replacing what was there).
    void link(const std::string& commit, const std::string& file, const std::string& oid) const;
    /// Every file of snapshots/COMMIT whose link resolves, sorted by path (size filled, no ids).
    std::vector<RepoFile> snapshot_files(const std::string& commit) const;

private:
    std::filesystem::path cache_dir_, dir_;
    std::string folder_;  ///< models--OWNER--NAME
};

/// An exclusive flock(2) on a lock file (created if missing), held until destruction: the same
/// lock huggingface_hub's FileLock takes, so two downloads of one blob never write it at once.
/// When another process holds it, `waiting` is called once and the lock is waited for.
class FileLock {
public:
    FileLock(const std::filesystem::path& path, const std::function<void()>& waiting);
    ~FileLock();
    FileLock(const FileLock&) = delete;
    FileLock& operator=(const FileLock&) = delete;

private:
    int fd_ = -1;
};

}  // namespace nitro::hub
