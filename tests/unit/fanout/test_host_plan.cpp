// Every host named by --hosts or a hostfile gets an ssh session and an agent,
// and --include/--exclude decide how many workers each runs on which devices.
// Every accepted form is checked here, and every refusal with its exact
// message: a user fixes a hostfile from the line the message quotes.

#include "ddprun/fanout/host_plan.hpp"

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

namespace ddprun {

// "name:slots[devices]" in failure output, found by ADL.
void PrintTo(const PlannedHost& h, std::ostream* os) {
    *os << h.name << ":" << (h.slots ? std::to_string(*h.slots) : "-") << "[";
    for (int d : h.devices) *os << d << ",";
    *os << "]";
}

namespace {

using Hosts = std::vector<PlannedHost>;

PlannedHost host(std::string name, std::optional<int> slots = std::nullopt,
                 std::vector<int> devices = {}) {
    return {std::move(name), slots, std::move(devices)};
}

struct ParseCase {
    std::string text;
    Hosts hosts;
};

struct ErrorCase {
    std::string text;
    std::string message;
};

TEST(HostPlan, HostsFlagForms) {
    const std::vector<ParseCase> cases = {
        {"gpu1", {host("gpu1")}},
        {"gpu1:8", {host("gpu1", 8)}},
        {"gpu1:4,gpu2", {host("gpu1", 4), host("gpu2")}},
        {"gpu[01-03]", {host("gpu01"), host("gpu02"), host("gpu03")}},
        // A slot count after a bracket expression applies to every host in it.
        {"gpu[01-02]:4", {host("gpu01", 4), host("gpu02", 4)}},
        {"gpu[01,03]:2,login", {host("gpu01", 2), host("gpu03", 2), host("login")}},
        {"a,b[1-2]:8,c:1", {host("a"), host("b1", 8), host("b2", 8), host("c", 1)}},
        {"10.0.0.1:8,10.0.0.2:8", {host("10.0.0.1", 8), host("10.0.0.2", 8)}},
        {"node_a.cluster.example.org:2", {host("node_a.cluster.example.org", 2)}},
        {"gpu1:16384", {host("gpu1", 16384)}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.text);
        auto hosts = parse_hosts_flag(c.text);
        ASSERT_TRUE(hosts.has_value()) << hosts.error();
        EXPECT_EQ(*hosts, c.hosts);
    }
}

TEST(HostPlan, HostsFlagErrors) {
    const std::vector<ErrorCase> cases = {
        {"", "--hosts is empty (write HOST[:SLOTS],..., e.g. gpu1:8,gpu2:8)"},
        {"gpu1:x",
         "--hosts entry 1 'gpu1:x': slots is not a number (write HOST:SLOTS, e.g. gpu1:8)"},
        {"gpu1:", "--hosts entry 1 'gpu1:': slots is not a number (write HOST:SLOTS, e.g. gpu1:8)"},
        {"a,gpu1:0",
         "--hosts entry 2 'gpu1:0': slots must be at least 1 (write HOST:SLOTS, e.g. gpu1:8)"},
        {"gpu1:-2",
         "--hosts entry 1 'gpu1:-2': slots must be at least 1 (write HOST:SLOTS, e.g. gpu1:8)"},
        {"gpu1:16385",
         "--hosts entry 1 'gpu1:16385': slots is more than 16384 (write HOST:SLOTS, e.g. gpu1:8)"},
        {"gpu1,gpu2,gpu1",
         "--hosts entry 3 'gpu1': host 'gpu1' is already in entry 1 (list each host once)"},
        {"gpu[1-3],gpu2:4",
         "--hosts entry 2 'gpu2:4': host 'gpu2' is already in entry 1 (list each host once)"},
        {"gpu[1,1]",
         "--hosts entry 1 'gpu[1,1]': host 'gpu1' is already in entry 1 (list each "
         "host once)"},
        {"a,,b", "--hosts entry 2 '': empty entry (a stray comma?)"},
        {"a,", "--hosts entry 2 '': empty entry (a stray comma?)"},
        {"gpu[1-", "--hosts entry 1 'gpu[1-': unclosed '[' at character 4"},
        {":4", "--hosts entry 1 ':4': empty host name (write HOST:SLOTS, e.g. gpu1:8)"},
        {"gpu 1",
         "--hosts entry 1 'gpu 1': whitespace at character 4 (hosts are separated by "
         "commas)"},
        {"a/b",
         "--hosts entry 1 'a/b': host name 'a/b' has '/', which no host name has (use "
         "letters, digits, '-', '.', '_')"},
        {"alice@gpu1",
         "--hosts entry 1 'alice@gpu1': host name 'alice@gpu1' has '@', which no "
         "host name has (use letters, digits, '-', '.', '_')"},
        {"-oProxyCommand=x",
         "--hosts entry 1 '-oProxyCommand=x': host name '-oProxyCommand=x' "
         "has '=', which no host name has (use letters, digits, '-', '.', "
         "'_')"},
        {"-gpu1",
         "--hosts entry 1 '-gpu1': host name '-gpu1' starts with '-' (ssh would read it "
         "as an option)"},
        {"a\x01", "--hosts entry 1 'a\\x01': unexpected character at character 2"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.text);
        auto hosts = parse_hosts_flag(c.text);
        ASSERT_FALSE(hosts.has_value());
        EXPECT_EQ(hosts.error(), c.message);
    }
}

TEST(HostPlan, HostfileForms) {
    const std::vector<ParseCase> cases = {
        // DeepSpeed / Open MPI.
        {"worker-0 slots=4\nworker-1 slots=4\n", {host("worker-0", 4), host("worker-1", 4)}},
        // horovodrun, and a bare host.
        {"gpu1:2\ngpu2\n", {host("gpu1", 2), host("gpu2")}},
        // Comments, blank lines, surrounding whitespace, tabs, no final newline.
        {"# the cluster\n\n  gpu1 slots=2   # the fast one\n\t gpu2\tslots=8\t\n   \n#gpu3 "
         "slots=1\ngpu4",
         {host("gpu1", 2), host("gpu2", 8), host("gpu4")}},
        // CRLF line endings.
        {"gpu1 slots=2\r\ngpu2:3\r\n\r\n# c\r\ngpu3\r\n",
         {host("gpu1", 2), host("gpu2", 3), host("gpu3")}},
        // Open MPI's max_slots is read and ignored, in either spelling.
        {"gpu1 slots=2 max_slots=4\ngpu2 max-slots=8\n", {host("gpu1", 2), host("gpu2")}},
        {"gpu1 max_slots=4 slots=2", {host("gpu1", 2)}},
        // A '#' right after the name is a comment too.
        {"gpu1#slots=2\n", {host("gpu1")}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.text);
        auto hosts = parse_hostfile(c.text);
        ASSERT_TRUE(hosts.has_value()) << hosts.error();
        EXPECT_EQ(*hosts, c.hosts);
    }
}

TEST(HostPlan, HostfileErrors) {
    const std::vector<ErrorCase> cases = {
        {"",
         "the hostfile lists no host (write one 'host slots=N' per line; '#' starts a "
         "comment)"},
        {"# only\n\n  \r\n",
         "the hostfile lists no host (write one 'host slots=N' per line; '#' "
         "starts a comment)"},
        {"gpu0 slots=1\n\ngpu1 slots=x\n",
         "hostfile line 3: 'gpu1 slots=x': slots is not a number (write 'host slots=N')"},
        {"gpu1 slots=\n",
         "hostfile line 1: 'gpu1 slots=': slots is not a number (write 'host "
         "slots=N')"},
        {"gpu1 slots=0",
         "hostfile line 1: 'gpu1 slots=0': slots must be at least 1 (write 'host "
         "slots=N')"},
        {"gpu1 slots=-4",
         "hostfile line 1: 'gpu1 slots=-4': slots must be at least 1 (write "
         "'host slots=N')"},
        {"gpu1 slots=99999",
         "hostfile line 1: 'gpu1 slots=99999': slots is more than 16384 "
         "(write 'host slots=N')"},
        {"gpu1 max_slots=x",
         "hostfile line 1: 'gpu1 max_slots=x': max_slots is not a number "
         "(write 'host slots=N')"},
        {"gpu1:0\r\n",
         "hostfile line 1: 'gpu1:0': slots must be at least 1 (write 'host:N' or "
         "'host slots=N')"},
        {"gpu1:x",
         "hostfile line 1: 'gpu1:x': slots is not a number (write 'host:N' or 'host "
         "slots=N')"},
        {"gpu1 slots=2 slots=4",
         "hostfile line 1: 'gpu1 slots=2 slots=4': slots given twice "
         "(write 'host slots=N' once)"},
        {"gpu1:2 slots=4",
         "hostfile line 1: 'gpu1:2 slots=4': slots given twice (write 'host "
         "slots=N' once)"},
        {"gpu1 slot=8",
         "hostfile line 1: 'gpu1 slot=8': unknown key 'slot' (write 'host "
         "slots=N'; Open MPI's max_slots=M is also read)"},
        {"gpu1 gpu2",
         "hostfile line 1: 'gpu1 gpu2': 'gpu2' is not key=value (one host per line: "
         "'host slots=N')"},
        {"gpu1 slots 4",
         "hostfile line 1: 'gpu1 slots 4': 'slots' is not key=value (one host per "
         "line: 'host slots=N')"},
        {"gpu1\n# x\ngpu2\r\n  gpu1 slots=2\n",
         "hostfile line 4: 'gpu1 slots=2': host 'gpu1' is already on line 1 (list each host "
         "once)"},
        {"gpu[1-2] slots=2",
         "hostfile line 1: 'gpu[1-2] slots=2': host name 'gpu[1-2]' has '[', "
         "which no host name has (use letters, digits, '-', '.', '_') (one "
         "host per line: 'host slots=N')"},
        {"a/b",
         "hostfile line 1: 'a/b': host name 'a/b' has '/', which no host name has (use "
         "letters, digits, '-', '.', '_') (one host per line: 'host slots=N')"},
        {"gpu\x7f"
         "1",
         "hostfile line 1: 'gpu\\x7f1': host name 'gpu\\x7f1' has '\\x7f', which "
         "no host name has (use letters, digits, '-', '.', '_') (one host per "
         "line: 'host slots=N')"},
        {":4", "hostfile line 1: ':4': empty host name (one host per line: 'host slots=N')"},
        // A lone CR (old Mac line ends) is blank inside a line, not a line end.
        {"gpu1 slots=2\rgpu2 slots=2",
         "hostfile line 1: 'gpu1 slots=2\\x0dgpu2 slots=2': "
         "'gpu2' is not key=value (one host per line: "
         "'host slots=N')"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.text);
        auto hosts = parse_hostfile(c.text);
        ASSERT_FALSE(hosts.has_value());
        EXPECT_EQ(hosts.error(), c.message);
    }
}

TEST(HostPlan, HostNames) {
    EXPECT_EQ(check_host_name("gpu-01.example.org"), "");
    EXPECT_EQ(check_host_name("a"), "");
    EXPECT_EQ(check_host_name(std::string(253, 'a')), "");
    EXPECT_EQ(check_host_name(std::string(254, 'a')),
              "host name '" + std::string(80, 'a') + "...' is longer than 253 characters");
    EXPECT_EQ(check_host_name(""), "empty host name");
    EXPECT_EQ(check_host_name("a\nb"),
              "host name 'a\\x0ab' has '\\x0a', which no host name has "
              "(use letters, digits, '-', '.', '_')");
}

// DeepSpeed's examples, over the hostfile of its docs: worker-0 and worker-1
// with 4 slots each, worker-2 with 2.
struct SelectCase {
    std::string include;
    std::string exclude;
    Hosts hosts;
};

Hosts pool() {
    return {host("worker-0", 4), host("worker-1", 4), host("worker-2", 2)};
}

TEST(HostPlan, IncludeAndExclude) {
    const std::vector<SelectCase> cases = {
        {"", "", pool()},
        // "-i worker-0@worker-1:0,2": all of worker-0, slots 0 and 2 of worker-1.
        {"worker-0@worker-1:0,2", "", {host("worker-0", 4), host("worker-1", 4, {0, 2})}},
        {"worker-2:0,1", "", {host("worker-2", 2, {0, 1})}},
        // Hosts keep the list's order; slots the order they were named in.
        {"worker-2@worker-0:3,1", "", {host("worker-0", 4, {3, 1}), host("worker-2", 2)}},
        // A host named twice: its slots add up; a whole host wins; repeats go.
        {"worker-1:0@worker-1:2,0", "", {host("worker-1", 4, {0, 2})}},
        {"worker-1:0@worker-1", "", {host("worker-1", 4)}},
        {"worker-1@worker-1:0", "", {host("worker-1", 4)}},
        // "-e worker-1:0": everything but slot 0 of worker-1.
        {"",
         "worker-1:0",
         {host("worker-0", 4), host("worker-1", 4, {1, 2, 3}), host("worker-2", 2)}},
        {"",
         "worker-2:0@worker-1:0,1",
         {host("worker-0", 4), host("worker-1", 4, {2, 3}), host("worker-2", 2, {1})}},
        // A whole host, or every slot of it: the host is dropped.
        {"", "worker-0", {host("worker-1", 4), host("worker-2", 2)}},
        {"", "worker-2:0,1@worker-2:1", {host("worker-0", 4), host("worker-1", 4)}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE("include '" + c.include + "' exclude '" + c.exclude + "'");
        auto hosts = select_hosts(pool(), c.include, c.exclude);
        ASSERT_TRUE(hosts.has_value()) << hosts.error();
        EXPECT_EQ(*hosts, c.hosts);
    }
}

TEST(HostPlan, IncludeAndExcludeErrors) {
    const std::vector<SelectCase> cases = {
        {"worker-0", "worker-1", {}},
        {"worker-9", "", {}},
        {"", "worker-1:4", {}},
        {"worker-2:0,2", "", {}},
        {"worker-1:x", "", {}},
        {"worker-1:", "", {}},
        {"worker-1:-1", "", {}},
        {"worker-0@", "", {}},
        {"", "@worker-0", {}},
        {"", "worker-0@worker-1@worker-2", {}},
        {"", "worker-0@worker-1:0,1,2,3@worker-2:1,0", {}},
    };
    const std::vector<std::string> messages = {
        "--include and --exclude cannot be used together (keep one, as in DeepSpeed)",
        "--include entry 'worker-9': host 'worker-9' is not in the host list",
        "--exclude entry 'worker-1:4': host worker-1 has no slot 4 (its slots are 0-3)",
        "--include entry 'worker-2:0,2': host worker-2 has no slot 2 (its slots are 0-1)",
        "--include entry 'worker-1:x': slot 'x' is not a slot number (slots count from 0: write "
        "HOST:SLOT,SLOT, e.g. worker-1:0,2)",
        "--include entry 'worker-1:': slot '' is not a slot number (slots count from 0: write "
        "HOST:SLOT,SLOT, e.g. worker-1:0,2)",
        "--include entry 'worker-1:-1': slot '-1' is not a slot number (slots count from 0: "
        "write HOST:SLOT,SLOT, e.g. worker-1:0,2)",
        "--include 'worker-0@' has an empty entry (a stray '@'? write host1@host2:0,2)",
        "--exclude '@worker-0' has an empty entry (a stray '@'? write host1@host2:0,2)",
        "--exclude 'worker-0@worker-1@worker-2' leaves no host to run on (it names every slot of "
        "every host)",
        "--exclude 'worker-0@worker-1:0,1,2,3@worker-2:1,0' leaves no host to run on (it names "
        "every slot of every host)",
    };
    ASSERT_EQ(cases.size(), messages.size());
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const auto& c = cases[i];
        SCOPED_TRACE("include '" + c.include + "' exclude '" + c.exclude + "'");
        auto hosts = select_hosts(pool(), c.include, c.exclude);
        ASSERT_FALSE(hosts.has_value());
        EXPECT_EQ(hosts.error(), messages[i]);
    }
    auto none = select_hosts({}, "", "");
    ASSERT_FALSE(none.has_value());
    EXPECT_EQ(none.error(), "no hosts to select from (give --hosts or --hostfile)");
}

// A host listed without a slot count takes --nproc_per_node, which may only be
// known on the host itself ("gpu"): naming its slots needs no count, taking
// slots away does.
TEST(HostPlan, HostsWithoutASlotCount) {
    const Hosts hosts = {host("a"), host("b", 2)};
    auto included = select_hosts(hosts, "a:1,3@b", "");
    ASSERT_TRUE(included.has_value()) << included.error();
    EXPECT_EQ(*included, (Hosts{host("a", std::nullopt, {1, 3}), host("b", 2)}));
    EXPECT_EQ(workers_on((*included)[0], 8), 2);
    EXPECT_EQ(workers_on((*included)[1], 8), 2);
    EXPECT_EQ(workers_on(host("c"), 8), 8);

    auto whole = select_hosts(hosts, "", "a");
    ASSERT_TRUE(whole.has_value()) << whole.error();
    EXPECT_EQ(*whole, (Hosts{host("b", 2)}));

    auto slots = select_hosts(hosts, "", "a:0");
    ASSERT_FALSE(slots.has_value());
    EXPECT_EQ(slots.error(),
              "--exclude entry 'a:0': host a has no slot count to take slots from (give it one: "
              "a:N in --hosts, 'a slots=N' in the hostfile, or a number for --nproc_per_node)");

    auto absurd = select_hosts(hosts, "a:16384", "");
    ASSERT_FALSE(absurd.has_value());
    EXPECT_EQ(absurd.error(), "--include entry 'a:16384': host a has no slot 16384");
}

// The whole path a caller takes: a hostfile, then a filter.
TEST(HostPlan, HostfileThenFilter) {
    auto hosts = parse_hostfile("gpu1 slots=2\ngpu2 slots=2 # spare\n");
    ASSERT_TRUE(hosts.has_value()) << hosts.error();
    auto selected = select_hosts(*hosts, "", "gpu2:1");
    ASSERT_TRUE(selected.has_value()) << selected.error();
    EXPECT_EQ(*selected, (Hosts{host("gpu1", 2), host("gpu2", 2, {0})}));
    EXPECT_EQ(workers_on((*selected)[1], 8), 1);
}

}  // namespace
}  // namespace ddprun
