// MappedFile (src/core/mapped_file.h): mapped, copied (--no-mmap) and locked views hold the same
// bytes; explicit huge pages either work or fail with a message that says how to get them; the
// model-file options reach GgufFile and leave other files alone.
#include "core/error.h"
#include "core/mapped_file.h"
#include "gguf/gguf.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

using nitro::HugePages;
using nitro::MapOptions;
using nitro::MappedFile;

std::string temp_file(const std::vector<uint8_t>& bytes) {
    const char* dir = std::getenv("TMPDIR");
    std::string path = std::string(dir && *dir ? dir : "/tmp") + "/nitro_mapped_file_XXXXXX";
    std::vector<char> buf(path.begin(), path.end());
    buf.push_back('\0');
    const int fd = mkstemp(buf.data());
    EXPECT_GE(fd, 0);
    FILE* f = fdopen(fd, "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
    return buf.data();
}

std::vector<uint8_t> pattern(size_t n) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 131 + 7) ^ (i >> 9));
    return v;
}

TEST(MappedFile, MappedCopiedAndLockedHoldTheSameBytes) {
    const std::vector<uint8_t> want = pattern((size_t{3} << 20) + 12345);  // not a multiple of 2 MiB
    const std::string path = temp_file(want);
    for (bool no_mmap : {false, true}) {
        for (bool lock : {false, true}) {
            for (HugePages h : {HugePages::Off, HugePages::Thp}) {
                MapOptions o;
                o.no_mmap = no_mmap;
                o.mlock = lock;
                o.huge_pages = h;
                MappedFile f(path, o);
                ASSERT_EQ(f.size(), want.size());
                EXPECT_EQ(std::memcmp(f.data(), want.data(), want.size()), 0) << no_mmap << lock;
                EXPECT_EQ(f.copied(), no_mmap);
                if (no_mmap) {
                    EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data()) % (size_t{2} << 20), 0u) << "copies start on a 2 MiB boundary";
                }
                MappedFile moved(std::move(f));  // moves keep the bytes and free once
                EXPECT_EQ(std::memcmp(moved.data(), want.data(), want.size()), 0);
            }
        }
    }
    std::remove(path.c_str());
}

TEST(MappedFile, ExplicitHugePagesWorkOrSayWhatIsMissing) {
    const std::vector<uint8_t> want = pattern(100000);
    const std::string path = temp_file(want);
    MapOptions o;
    o.huge_pages = HugePages::Explicit;
    try {
        MappedFile f(path, o);
        EXPECT_TRUE(f.copied());
        EXPECT_EQ(std::memcmp(f.data(), want.data(), want.size()), 0);
    } catch (const nitro::Error& e) {
        EXPECT_NE(std::string(e.what()).find("nr_hugepages"), std::string::npos) << e.what();
    }
    std::remove(path.c_str());
    EXPECT_THROW(nitro::parse_huge_pages("always"), nitro::Error);
    EXPECT_EQ(nitro::parse_huge_pages("thp"), HugePages::Thp);
}

TEST(MappedFile, ModelOptionsReachGgufFiles) {
    const std::string fixture = std::string(NITRO_SOURCE_DIR) + "/models/tiny-moe-pystd.gguf";
    const MapOptions before = nitro::model_map_options();
    EXPECT_EQ(before.huge_pages, HugePages::Thp);  // the default for models
    EXPECT_FALSE(before.no_mmap);
    MapOptions o = before;
    o.no_mmap = true;
    nitro::set_model_map_options(o);
    {
        nitro::GgufFile copied(fixture);
        EXPECT_TRUE(copied.file().copied());
        nitro::set_model_map_options(before);
        nitro::GgufFile mapped(fixture);
        EXPECT_FALSE(mapped.file().copied());
        ASSERT_EQ(copied.file_size(), mapped.file_size());
        EXPECT_EQ(std::memcmp(copied.mapping(), mapped.mapping(), copied.file_size()), 0);
    }
    nitro::set_model_map_options(before);
    EXPECT_FALSE(MappedFile(fixture).copied());  // other files: plain mappings
}

}  // namespace
