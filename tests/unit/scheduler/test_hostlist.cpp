// The first host of a Slurm node list becomes node 0's address on every node:
// one wrong expansion and the whole allocation waits for a rendezvous that
// never comes. Every form Slurm writes is checked here, and so is every
// malformed one, which must be refused with its position rather than guessed.

#include "ddprun/scheduler/hostlist.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ddprun {
namespace {

using Hosts = std::vector<std::string>;

struct ExpandCase {
    std::string list;
    Hosts hosts;
};

TEST(Hostlist, ExpandsEveryFormSlurmWrites) {
    const std::vector<ExpandCase> cases = {
        {"alpha,beta,gamma", {"alpha", "beta", "gamma"}},
        {"node[01-04,07]", {"node01", "node02", "node03", "node04", "node07"}},
        {"linux[1,2]", {"linux1", "linux2"}},
        {"host-[001-002]", {"host-001", "host-002"}},
        {"nodeA,nodeB[001,003],nodeC", {"nodeA", "nodeB001", "nodeB003", "nodeC"}},
        {"jean-zay-ia810", {"jean-zay-ia810"}},
        {"host[001,003-004,006]", {"host001", "host003", "host004", "host006"}},
        {"gpu[1-2]-ib", {"gpu1-ib", "gpu2-ib"}},
        // Names without digits, alone and next to bracketed ones.
        {"login", {"login"}},
        {"head,compute[1-2],storage", {"head", "compute1", "compute2", "storage"}},
        // Zero padding: the width of the lower bound, kept past a digit boundary.
        {"n[08-11]", {"n08", "n09", "n10", "n11"}},
        {"n[8-11]", {"n8", "n9", "n10", "n11"}},
        {"n[098-101]", {"n098", "n099", "n100", "n101"}},
        {"n[0-1]", {"n0", "n1"}},
        {"n[007]", {"n007"}},
        {"n[00-01]", {"n00", "n01"}},
        // A one-element range, and a single number.
        {"n[5-5]", {"n5"}},
        {"n[5]", {"n5"}},
        // Several bracket groups: every combination, the first group slowest.
        {"rack[1-2]-node[01-02]", {"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"}},
        {"r[1,3]n[1-2]x", {"r1n1x", "r1n2x", "r3n1x", "r3n2x"}},
        // Digits before a bracket belong to the name.
        {"node1[0-2]", {"node10", "node11", "node12"}},
        // Order is kept; nothing is sorted or deduplicated.
        {"b,a,b", {"b", "a", "b"}},
        {"n[3,1,2]", {"n3", "n1", "n2"}},
        // Fully qualified names and underscores.
        {"gpu[1-2].cluster.example.org", {"gpu1.cluster.example.org", "gpu2.cluster.example.org"}},
        {"my_node[1-2]", {"my_node1", "my_node2"}},
        // A group with no prefix.
        {"[1-2]", {"1", "2"}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.list);
        auto hosts = expand_hostlist(c.list);
        ASSERT_TRUE(hosts.has_value()) << hosts.error();
        EXPECT_EQ(*hosts, c.hosts);
    }
}

TEST(Hostlist, LargeRangesAreExpandedInFull) {
    auto hosts = expand_hostlist("node[0001-1000]");
    ASSERT_TRUE(hosts.has_value()) << hosts.error();
    ASSERT_EQ(hosts->size(), 1000u);
    EXPECT_EQ(hosts->front(), "node0001");
    EXPECT_EQ((*hosts)[499], "node0500");
    EXPECT_EQ(hosts->back(), "node1000");
}

TEST(Hostlist, TheCapIsExactlyTheLimit) {
    // 100 x 1000 = the cap: allowed. One more host, in any position: refused.
    auto at_cap = expand_hostlist("r[1-100]n[1-1000]");
    ASSERT_TRUE(at_cap.has_value()) << at_cap.error();
    EXPECT_EQ(at_cap->size(), k_max_hostlist_hosts);
    EXPECT_EQ(at_cap->back(), "r100n1000");
    for (std::string over :
         {"r[1-100]n[1-1000],extra", "extra,r[1-100]n[1-1000]", "r[1-100]n[1-1000,2000]"}) {
        SCOPED_TRACE(over);
        auto hosts = expand_hostlist(over);
        ASSERT_FALSE(hosts.has_value());
        EXPECT_NE(hosts.error().find("more than 100000 hosts"), std::string::npos) << hosts.error();
    }
}

struct RejectCase {
    std::string list;
    std::vector<std::string> mentions;
};

TEST(Hostlist, MalformedListsAreRejectedWithWhereAndWhat) {
    const std::vector<RejectCase> cases = {
        {"", {"empty host list"}},
        // Unbalanced or nested brackets.
        {"node[1-2", {"unclosed '['", "character 5"}},
        {"node[1-2,a[3]]", {"'[' inside brackets", "character 11"}},
        {"node1-2]", {"']' without '['", "character 8"}},
        {"a,node[1]]", {"']' without '['", "character 10"}},
        {"node[1-2]]", {"']' without '['"}},
        {"[", {"unclosed '['", "character 1"}},
        // Empty brackets, empty entries and empty names.
        {"node[]", {"empty brackets", "character 5"}},
        {"node[1,]", {"empty entry", "character 8"}},
        {"node[,1]", {"empty entry", "character 6"}},
        {"node[1,,2]", {"empty entry"}},
        {"a,,b", {"empty host name", "character 3"}},
        {",a", {"empty host name", "character 1"}},
        {"a,", {"empty host name", "trailing comma"}},
        {",", {"empty host name"}},
        // Ranges that are not ranges of numbers.
        {"node[5-3]", {"'5-3'", "backwards", "character 6"}},
        {"node[a-c]", {"'a-c'", "not a number"}},
        {"node[1-b]", {"'1-b'", "not a number"}},
        {"node[1-]", {"'1-'", "not a number"}},
        {"node[-3]", {"'-3'", "not a number"}},
        {"node[1-2-3]", {"'1-2-3'", "not a number"}},
        {"node[x]", {"'x'", "not a number"}},
        {"node[+1]", {"'+1'", "not a number"}},
        {"node[1 -2]", {"whitespace", "character 7"}},
        {"node[1234567890123456789]", {"not a number"}},
        // Whitespace and control characters are not part of host names.
        {"a, b", {"whitespace", "character 3", "separated by commas"}},
        {"a b", {"whitespace"}},
        {"a\tb", {"whitespace"}},
        {"a\x01", {"unexpected character", "character 2"}},
        // Absurd sizes are refused before anything is built.
        {"node[1-99999999999]", {"more than 100000 hosts"}},
        {"node[1-100001]", {"more than 100000 hosts"}},
        {"a[1-1000]b[1-1000]", {"more than 100000 hosts"}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.list);
        auto hosts = expand_hostlist(c.list);
        ASSERT_FALSE(hosts.has_value()) << "expanded to " << ::testing::PrintToString(*hosts);
        EXPECT_EQ(hosts.error().find('\n'), std::string::npos) << hosts.error();
        for (const std::string& mention : c.mentions)
            EXPECT_NE(hosts.error().find(mention), std::string::npos)
                << "'" << hosts.error() << "' does not mention '" << mention << "'";
    }
}

}  // namespace
}  // namespace ddprun
