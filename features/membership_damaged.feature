@membership @cap-membership @mem-damaged
Feature: Credential files as they go wrong — a damaged CA line, a file briefly empty, an early renewal (SPEC §18, [C-27])

  Operators paste CA keys between terminals and editors; a paste cut at a multiple of 4 base64
  characters leaves a line that still decodes and still names its key type, but whose key is cut.
  [C-27] 1: such a line of a type the gateway takes makes the file broken (MEM-1: not applied, the
  last good content kept, an ERROR naming the file and the line); only a well-formed line of a type
  the gateway does not take is skipped. [C-27] 2: a file rewritten in place is briefly empty, which
  is no decision to trust nobody: a file that turns empty where it held entries is applied only
  once it has stayed so for 1 s (within MEM-1's 2 s all the same). [C-27] 3: a renewal dropped in
  before its `valid after` is refused, and taken — with no file change and no SIGHUP — when it
  becomes valid, at once as [C-26] reads it. Every CA is made by the real
  ssh-keygen of OpenSSH (CONTRACT §12). Gateways heartbeat every second (the suite's setting).

  Background:
    Given a broker
    And a fleet CA "fleet" made by ssh-keygen

  # Host "b" is certified by the CA whose line is cut (line 3 of every trust file: a comment, then
  # "fleet", then it): a gateway that skipped the cut line would drop "b" — its REPLYs rejected on
  # "a", its own certificate's CA gone on "b".
  @MEM-1 @MEM-2 @damaged-ca
  Scenario Outline: a trust file whose <kind> CA line lost its last 4 base64 characters is not applied: an ERROR names it and its line, and the last good content holds
    Given a fleet CA "cut" made by ssh-keygen <args>
    And every gateway trusts the CAs "fleet" and "cut"
    And host "b" holds a certificate from "cut" and is in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" finishes each brief quickly
    And the probe watches the wire
    When "lead" sends briefs to "w1", which replies to each, in the background
    And in every trust file the line of the CA "cut" loses its last 4 base64 characters
    Then within 2 seconds the gateway on "a" logs an ERROR naming its trust file and line 3
    And within 2 seconds the gateway on "b" logs an ERROR naming its trust file and line 3
    When the traffic has made 3 more round trips and stops
    Then the traffic lost nothing, and nothing was rejected or duplicated
    And within 2 heartbeats the rosters of "a" and "b" all list "lead" on "a" and "w1" on "b"

    Examples:
      | kind             | args               |
      | ed25519          | -t ed25519         |
      | ECDSA nistp256   | -t ecdsa           |
      | ECDSA nistp384   | -t ecdsa -b 384    |
      | ECDSA nistp521   | -t ecdsa -b 521    |
      | RSA              | -t rsa             |

  # [C-27] 2: host "b" is certified (the trust file) and host "a" is in the peers files only. A
  # gateway that applied the empty trust file would drop "b" from the roster of "a", the empty peers
  # file "a" from the roster of "b" — while the file is still empty: the rosters are watched from
  # the truncation on, over a window past the write-back.
  @MEM-1 @emptied-file
  Scenario Outline: a <file> emptied in place and written back 300 ms later is never applied empty: every host stays listed and the traffic loses nothing
    Given every gateway trusts the CA "fleet"
    And host "b" holds a certificate from "fleet" and is in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" finishes each brief quickly
    And the probe watches the wire
    Then within 2 heartbeats the rosters of "a" and "b" all list "lead" on "a" and "w1" on "b"
    When "lead" sends briefs to "w1", which replies to each, in the background
    And every gateway's <file> is emptied in place and written back as it was 300 ms later
    Then over a window the rosters of "a" and "b" keep listing "lead" on "a" and "w1" on "b"
    When the traffic has made 3 more round trips and stops
    Then the traffic lost nothing, and nothing was rejected or duplicated

    Examples:
      | file       |
      | trust file |
      | peers file |

  # [C-27] 2 for the revocation list: the probe plays host "x", certified by "fleet" with serial
  # 77, which every list revokes, and heartbeats it every 100 ms from the truncation on. A gateway
  # that applied the briefly empty list would let "x" in until the list is back.
  @MEM-1 @MEM-4 @emptied-file
  Scenario: a revocation list emptied in place and written back 300 ms later is never applied empty: the revoked host stays out
    Given every gateway trusts the CA "fleet"
    And every gateway reads a revocation list revoking serial 77
    And hosts "a" and "b" hold certificates from "fleet" and are in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    When the probe, as host "x", carries a certificate from "fleet" with serial 77 in its _gateway presence
    And the probe, as host "x", publishes the presence of "xw"
    Then within 2 heartbeats the rosters of "a" and "b" all list "lead" on "a" and "w1" on "b"
    When every gateway's revocation list is emptied in place and written back as it was 300 ms later
    Then over a window the rosters of "a" and "b" list nothing of host "x" while the probe, as that host, heartbeats "xw" every 100 ms

  # The hold is no refusal: a file left empty is applied within MEM-1's 2 s.
  @MEM-1 @emptied-file
  Scenario Outline: a <file> emptied and left so is applied within 2 seconds: host "<host>" leaves the roster of "<other>"
    Given every gateway trusts the CA "fleet"
    And host "b" holds a certificate from "fleet" and is in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    Then within 2 heartbeats the rosters of "a" and "b" all list "lead" on "a" and "w1" on "b"
    When every gateway's <file> is emptied in place and left so
    Then within 2 seconds the roster of "<other>" lists nothing of host "<host>"

    Examples:
      | file       | host | other |
      | trust file | b    | a     |
      | peers file | a    | b     |

  # [C-27] 3: the old certificate would otherwise run out with a valid one on disk. The skew is
  # cut to 1 second so that a certificate valid from 8 seconds on is not valid now.
  @MEM-3 @early-renewal
  Scenario: a rotation refused because its certificate is not valid yet is taken when it becomes valid, with no file change and no SIGHUP
    Given the gateways allow a clock skew of 1 second
    And every gateway trusts the CA "fleet"
    And hosts "a" and "b" hold certificates from "fleet" and are in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" finishes each brief quickly
    And the probe watches the wire
    When "lead" sends briefs to "w1", which replies to each, in the background
    And "b" rotates to a new key and a certificate from "fleet" valid from 8 seconds from now
    Then within 2 seconds the gateway on "b" logs an ERROR naming its certificate file
    And when that certificate becomes valid, "b" takes it at once, with no file change and no SIGHUP
    When the traffic has made 3 more round trips and stops
    Then the traffic lost nothing, and nothing was rejected or duplicated

  # CONTRACT §12: a revocation list saved with CRLF line endings (a Windows editor). SPEC does not
  # say whether a gateway reads CR LF; it must not apply such a list with an entry lost: each
  # gateway reads it as LF (the revoked host leaves its roster) or refuses it as broken (MEM-1).
  @MEM-4 @MEM-1 @crlf-krl
  Scenario: a revocation list written with CRLF line endings is read as written or refused with an ERROR, never applied with its entry lost
    Given every gateway trusts the CA "fleet"
    And every gateway reads a revocation list revoking serial 900
    And hosts "a" and "b" hold certificates from "fleet" and are in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    When the probe, as host "x", carries a certificate from "fleet" with serial 77 in its _gateway presence
    And the probe, as host "x", publishes the presence of "x1"
    Then within 2 heartbeats every roster lists "x1" on host "x"
    When serial 77 is revoked in every revocation list, written with CRLF line endings
    Then within 2 seconds each gateway either lists nothing of host "x" or logs an ERROR naming its revocation list

  # [C-27] 4: at the start an operator reads which files the gateway took, and what they hold.
  @MEM-1 @start-names-files
  Scenario: a gateway's start log names its peers file, trust file, revocation list and host certificate, each with a count
    Given every gateway trusts the CA "fleet"
    And every gateway reads a revocation list revoking serial 900
    And host "a" holds a certificate from "fleet" and is in no peers file
    And host "a" runs a gateway with a main "lead"
    Then the start log of "a" names its peers file, trust file, revocation list and host certificate, each on a line with a count
