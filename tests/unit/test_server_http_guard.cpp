// The HTTP front's guards without a server (issue 18): body framing, the API-key check (any case
// of "Bearer", constant-time compare), the Host check against DNS rebinding, URL authorities with
// IPv6 brackets, and the elastic thread pool that keeps /health answerable under load.
#include "server/http_guard.h"
#include "server/http_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

namespace nitro::server {
namespace {

TEST(ServerHttpGuard, BodyFramingRefusesAmbiguousLengths) {
    EXPECT_FALSE(body_framing({}, {}).has_body());
    EXPECT_TRUE(body_framing({}, {}).error.empty());
    EXPECT_EQ(body_framing({"42"}, {}).content_length, 42u);
    EXPECT_TRUE(body_framing({" 7 "}, {}).error.empty());
    EXPECT_FALSE(body_framing({"0"}, {}).has_body());
    EXPECT_TRUE(body_framing({}, {"Chunked"}).chunked);
    EXPECT_TRUE(body_framing({"5", "5"}, {}).error.empty());
    for (const auto& f : {body_framing({"5", "50"}, {}), body_framing({"5"}, {"chunked"}), body_framing({"-1"}, {}),
                          body_framing({"1e3"}, {}), body_framing({""}, {}), body_framing({"99999999999999999999"}, {}),
                          body_framing({}, {"gzip, chunked"}), body_framing({}, {"chunked", "chunked"})})
        EXPECT_FALSE(f.error.empty());
}

TEST(ServerHttpGuard, ApiKeyBearerAnyCaseConstantTimeCompare) {
    const std::string key = "s3cret-key";
    for (const char* auth : {"Bearer s3cret-key", "bearer s3cret-key", "BEARER s3cret-key", "Bearer   s3cret-key", "  Bearer\ts3cret-key  "})
        EXPECT_TRUE(api_key_matches(auth, "", key)) << auth;
    for (const char* auth : {"Basic s3cret-key", "Bearer s3cret-keyX", "Bearer s3cret-ke", "Bearer", "s3cret-key", "Bearers3cret-key", ""})
        EXPECT_FALSE(api_key_matches(auth, "", key)) << auth;
    EXPECT_TRUE(api_key_matches("", "s3cret-key", key));
    EXPECT_TRUE(api_key_matches("Bearer wrong", "s3cret-key", key));
    EXPECT_FALSE(api_key_matches("", "s3cret", key));
    EXPECT_TRUE(constant_time_equal("abc", "abc"));
    EXPECT_FALSE(constant_time_equal("abc", "abd"));
    EXPECT_FALSE(constant_time_equal("abc", "abcd"));
    EXPECT_FALSE(constant_time_equal("", "a"));
    EXPECT_TRUE(constant_time_equal("", ""));
}

TEST(ServerHttpGuard, HostCheckAgainstDnsRebinding) {
    const std::vector<std::string> none, allowed = {"nitro.lan"};
    for (const char* h : {"127.0.0.1:8080", "127.0.0.1", "localhost:8080", "LocalHost", "localhost.", "[::1]:8080", "[::1]",
                          "10.0.0.7:80", "app.localhost:3000", ""})
        EXPECT_TRUE(host_allowed(h, "127.0.0.1", none)) << h;
    for (const char* h : {"attacker.example", "attacker.example:8080", "localhost.attacker.example", "127.0.0.1.nip.io", "[::1",
                          "nitro.lan"})
        EXPECT_FALSE(host_allowed(h, "127.0.0.1", none)) << h;
    EXPECT_TRUE(host_allowed("Nitro.LAN:8080", "127.0.0.1", allowed));
    EXPECT_TRUE(host_allowed("myhost:8080", "myhost", none)) << "the --host name itself";
    EXPECT_TRUE(host_allowed("anything.example", "127.0.0.1", {"*"}));
    EXPECT_EQ(host_of_header("[::1]:8080"), "::1");
    EXPECT_EQ(host_of_header("Example.COM.:80"), "example.com");
}

TEST(ServerHttpGuard, LoopbackHostsAreThoseThatOnlyThisMachineReaches) {
    for (const char* h :
         {"127.0.0.1", "127.1.2.3", "localhost", "LOCALHOST", "app.localhost", "::1", "[::1]", "0:0:0:0:0:0:0:1"})
        EXPECT_TRUE(is_loopback_host(h)) << h;
    for (const char* h : {"0.0.0.0", "::", "[::]", "10.0.0.7", "192.168.1.2", "128.0.0.1", "::ffff:10.0.0.1", "example.com",
                          "localhost.example.com", "", "127.0.0"})
        EXPECT_FALSE(is_loopback_host(h)) << h;
}

TEST(ServerHttpGuard, UrlAuthorityBracketsIpv6) {
    EXPECT_EQ(url_authority("::1", 8080), "[::1]:8080");
    EXPECT_EQ(url_authority("fe80::1%lo", 1), "[fe80::1%lo]:1");
    EXPECT_EQ(url_authority("127.0.0.1", 80), "127.0.0.1:80");
    EXPECT_EQ(url_authority("localhost", 80), "localhost:80");
    EXPECT_EQ(url_authority("[::1]", 80), "[::1]:80");
}

TEST(ServerHttpPool, GrowsPastItsThreadsWhenAllAreBusyAndShrinksBack) {
    ElasticThreadPool pool(2, 8, std::chrono::milliseconds(100));
    EXPECT_EQ(pool.threads(), 2u);
    std::promise<void> release;
    std::shared_future<void> gate = release.get_future().share();
    std::atomic<int> running{0};
    for (int i = 0; i < 6; ++i)  // six connections that hold their thread
        pool.enqueue([&, gate] {
            ++running;
            gate.wait();
        });
    for (int i = 0; i < 200 && running < 6; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(running.load(), 6);
    // A seventh (a /health request) runs at once.
    std::promise<void> ran;
    pool.enqueue([&] { ran.set_value(); });
    EXPECT_EQ(ran.get_future().wait_for(std::chrono::seconds(2)), std::future_status::ready);
    EXPECT_LE(pool.threads(), 8u);
    release.set_value();
    for (int i = 0; i < 200 && pool.threads() > 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(pool.threads(), 2u) << "the extra threads end after their idle time";
    // At the cap, work waits instead of starting threads.
    std::promise<void> release2;
    std::shared_future<void> gate2 = release2.get_future().share();
    std::atomic<int> done{0};
    for (int i = 0; i < 12; ++i) pool.enqueue([&, gate2] { gate2.wait(); ++done; });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(pool.threads(), 8u);
    release2.set_value();
    pool.shutdown();
    EXPECT_EQ(done.load(), 12) << "shutdown runs what was queued";
}

}  // namespace
}  // namespace nitro::server
