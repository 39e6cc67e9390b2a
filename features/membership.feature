@membership @cap-membership
Feature: Fleet membership and key lifecycle — hosts join, leave and re-key while the fleet runs (SPEC §18)

  Every credential here is made by the real ssh-keygen of OpenSSH: fleet CAs (ssh-keygen -t
  ed25519), host certificates over each gateway's signing key (ssh-keygen -s … -h), revocation
  lists in the KRL specification form. The suite changes a gateway's files the way configuration
  managers do — the new content written beside the file and renamed over it — and "within 2
  seconds" counts from that rename, or from the expiry (CONTRACT §12). A host "in no peers file"
  is listed in nobody's peers file, its own included: its key is its only through its certificate.
  The probe watches the wire, and plays hosts of its own: it holds their keys and signs their
  presence and messages with them. Gateways heartbeat every second here (the suite's setting),
  except where a host must be dropped within 2 seconds: there every 3 seconds, so that entries
  left to their ttl (3 heartbeats) could not pass for a drop.

  Background:
    Given a broker
    And a fleet CA "fleet" made by ssh-keygen

  @MEM-5 @MEM-2
  Scenario: a host in no peers file joins the running fleet with a CA-signed certificate
    Given every gateway trusts the CA "fleet"
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    And the probe watches the wire
    When host "j", in no peers file and holding a certificate from "fleet", joins with a main "boss"
    Then within 2 heartbeats of its start the rosters of "a", "b" and "j" all list "boss" on "j"
    And the probe saw host "j" carry its certificate in its _gateway presence
    When "boss" sends "welcome aboard" to "w1"
    Then herdr on "b" records exactly 1 inject into "w1" with text "welcome aboard"
    And the send returns "injected" within 10 seconds

  @MEM-2 @MEM-5
  Scenario: a host the probe plays with a valid certificate from the fleet CA is let in
    Given every gateway trusts the CA "fleet"
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    And the probe watches the wire
    When the probe, as host "x", presents a valid certificate from "fleet" in its _gateway presence
    And the probe, as host "x", announces "x1"
    Then within 2 heartbeats every roster lists "x1" on host "x"
    And the probe, as host "x", gets a brief from "x1" injected into "w1"

  @MEM-2 @SIG-5
  Scenario Outline: a host presenting <credential> is never let in
    Given every gateway trusts the CA "fleet"
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    And the probe watches the wire
    When the probe, as host "x", presents <credential> in its _gateway presence
    Then the gateway of "the roster" dead-letters it with x-death reason "rejected"
    And the gateway of "the roster" logs the rejection naming the check "<check>"
    And every gateway's line rejecting it names host "x"
    When the probe, as host "x", announces "x1"
    And the probe, as host "x", sends "w1" a brief from "x1"
    Then the gateway of "w1" dead-letters it with x-death reason "rejected"
    And the gateway of "w1" logs the rejection naming the check "<check>"
    And over a window no roster lists anything of host "x"
    And nothing hostile was injected into "w1" or held for "lead"
    And no gateway published FAILED
    And every gateway is still ready

    # CONTRACT §12: a presence from a host the receiver holds no key for, carrying a bad
    # certificate, is both unverifiable and badly certified: `certificate or signature`; so is the
    # brief signed afterwards with the key that certificate names.
    Examples:
      | credential                                  | check                                    |
      | a certificate from a CA no gateway trusts   | certificate or signature                 |
      | a user certificate from "fleet"             | certificate or signature                 |
      | a certificate from "fleet" naming host "b"  | certificate or signature                 |
      | a certificate from "fleet" not yet valid    | certificate or cert_expired or signature |
      | a certificate from "fleet" that has expired | cert_expired or signature                |
      | a certificate from "fleet" over another key | certificate or signature                 |
      | a truncated certificate from "fleet"        | certificate or signature                 |
      | a garbage certificate                       | certificate or signature                 |

  @MEM-2 @MEM-1
  Scenario: a certificate from a CA removed from the trust files mid-run stops verifying, and its host is dropped
    Given the gateways' heartbeat is 3 seconds
    And every gateway trusts the CAs "fleet" and "old"
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    And the probe watches the wire
    When the probe, as host "x", presents a valid certificate from "old" in its _gateway presence
    And the probe, as host "x", announces "x1"
    Then within 2 heartbeats every roster lists "x1" on host "x"
    When the CA "old" is removed from every trust file
    Then within 2 seconds every roster lists nothing of host "x"
    When the probe, as host "x", sends "w1" a brief from "x1"
    Then the gateway of "w1" dead-letters it with x-death reason "rejected"
    And the gateway of "w1" logs the rejection naming the check "certificate or signature"
    And nothing hostile was injected into "w1" or held for "lead"
    And every gateway is still ready

  @MEM-1
  Scenario: a host added to the peers files while briefs and replies flow is let in, and once removed is dropped and rejected
    Given the gateways' heartbeat is 3 seconds
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" finishes each brief quickly
    And the probe watches the wire
    And host "j", in no peers file, runs a gateway with a main "boss"
    When "lead" sends briefs to "w1", which replies to each, in the background
    And "j" is added to every peers file
    Then within 2 seconds and a heartbeat the rosters of "a" and "b" list "boss" on "j"
    When "boss" sends "a brief from the new host" to "w1"
    Then herdr on "b" records exactly 1 inject into "w1" with text "a brief from the new host"
    And the send returns "injected" within 10 seconds
    When "j" is removed from every peers file
    Then within 2 seconds the rosters of "a" and "b" list nothing of host "j"
    When the probe publishes a SEND from "boss" to "w1" signed with the key of "j"
    Then the gateway of "w1" dead-letters it with x-death reason "rejected"
    And the gateway of "w1" logs the rejection naming the check "signature"
    When the traffic has made 3 more round trips and stops
    Then the traffic lost nothing, and nothing was rejected or duplicated

  @MEM-1 @MEM-3
  Scenario: a peers entry listing two keys lets a fleet without a CA rotate a host's key while briefs and replies flow
    Given host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" finishes each brief quickly
    And the probe watches the wire
    When "lead" sends briefs to "w1", which replies to each, in the background
    And every peers file lists a second key for "b"
    Then within 2 seconds every other gateway takes the second key of "b" as the key of host "b"
    When the gateway on "b" switches to its second key
    Then within 2 heartbeats the probe sees host "b" sign a REPLY and an INJECTED with its new key
    When the probe publishes a REPLY from "w1" to "lead" signed with the old key of "b"
    Then "lead" drains the message signed with the old key, once
    When every peers file lists only the second key for "b"
    And the traffic has made 3 more round trips and stops
    Then the traffic lost nothing, and nothing was rejected or duplicated

  @MEM-1
  Scenario Outline: a broken <file> applied mid-run is not applied: an ERROR names it and its line, and the last good content holds
    Given every gateway trusts the CA "fleet"
    And every gateway reads a revocation list
    And host "b" holds a certificate from "fleet" and is in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" finishes each brief quickly
    And the probe watches the wire
    And the probe announces "p1" on host "probe"
    When "lead" sends briefs to "w1", which replies to each, in the background
    And the <file> of "a" is replaced by one whose line <line> does not parse
    Then within 2 seconds the gateway on "a" logs an ERROR naming its <file> and line <line>
    When the traffic has made 5 more round trips and stops
    Then the traffic lost nothing, and nothing was rejected or duplicated
    And a valid message from "p1" to "lead" is still accepted

    # Each broken file would do harm if what comes before its bad line were applied: the peers
    # file would lose "probe", the trust file its CA, and the revocation list would revoke "b".
    Examples:
      | file            | line |
      | peers file      | 3    |
      | trust file      | 2    |
      | revocation list | 4    |

  @MEM-1
  Scenario: a gateway started with a broken trust file refuses to start, naming the file and the line
    Given every gateway trusts the CA "fleet"
    When host "c" starts a gateway whose trust file's line 2 does not parse
    Then the gateway on "c" exits non-zero within 10 seconds, its output naming its trust file and line 2

  @MEM-3 @MEM-2
  Scenario: a key rotated while briefs and replies flow loses, rejects and duplicates nothing, and its new certificate is announced first
    Given every gateway trusts the CA "fleet"
    And hosts "a" and "b" hold certificates from "fleet" and are in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" finishes each brief quickly
    And the probe watches the wire
    When "lead" sends briefs to "w1", which replies to each, in the background
    And "b" rotates to a new key and a new certificate from "fleet"
    Then within 2 heartbeats the probe sees host "b" sign a REPLY and an INJECTED with its new key
    And the first message "b" signed with its new key is its _gateway presence carrying the new certificate
    And "b" applied its rotation at once after the SIGHUP
    When the probe publishes a REPLY from "w1" to "lead" signed with the old key of "b"
    Then "lead" drains the message signed with the old key, once
    When the traffic has made 3 more round trips and stops
    Then the traffic lost nothing, and nothing was rejected or duplicated

  @MEM-3
  Scenario: a rotation to a certificate over another key is refused, and the gateway keeps its old pair
    Given every gateway trusts the CA "fleet"
    And hosts "a" and "b" hold certificates from "fleet" and are in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" finishes each brief quickly
    And the probe watches the wire
    When "lead" sends briefs to "w1", which replies to each, in the background
    And "b" rotates to a new key and a certificate from "fleet" over another key
    Then within 2 seconds the gateway on "b" logs an ERROR naming its certificate file
    When the traffic has made 3 more round trips and stops
    Then the traffic lost nothing, and nothing was rejected or duplicated
    And every message "b" published since the refused rotation is signed with its old key

  @MEM-4
  Scenario Outline: a certificate revoked by <entry> mid-traffic stops verifying within 2 seconds
    Given the gateways' heartbeat is 3 seconds
    And the gateways' inject bound is 5 seconds
    And every gateway trusts the CA "fleet"
    And every gateway reads a revocation list
    And host "b" holds a certificate from "fleet" and is in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" finishes each brief quickly
    And the probe watches the wire
    When "lead" sends briefs to "w1", which replies to each, in the background
    And the certificate of "b" is revoked by <entry> in every revocation list
    Then within 2 seconds the roster of "a" lists nothing of host "b"
    And within 2 seconds the gateway on "b" answers /readyz 503, and still does over a window
    When the probe publishes a REPLY from "w1" to "lead" signed with the key of "b"
    Then the gateway of "lead" dead-letters it with x-death reason "rejected"
    And the gateway of "lead" logs the rejection naming the check "revoked"
    When the traffic stops
    Then the traffic duplicated nothing, and "lead" got nothing "b" published more than 2 seconds after the change

    Examples:
      | entry                        |
      | its serial                   |
      | its key id                   |
      | its public key               |
      | its key's SHA256 fingerprint |

  @MEM-4
  Scenario: a certificate that expires during the scenario stops verifying, and its host is dropped
    Given the gateways' heartbeat is 3 seconds
    And every gateway trusts the CA "fleet"
    And the gateways allow a clock skew of 1 second
    And host "b" holds a certificate from "fleet" valid for 20 more seconds, and is in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And the probe watches the wire
    Then until its certificate is about to expire the roster of "a" keeps listing "w1" on "b"
    When the certificate of "b" expires
    Then within 2 seconds the roster of "a" lists nothing of host "b"
    And within 2 seconds the gateway on "b" answers /readyz 503, and still does over a window
    When the probe publishes a REPLY from "w1" to "lead" signed with the key of "b"
    Then the gateway of "lead" dead-letters it with x-death reason "rejected"
    And the gateway of "lead" logs the rejection naming the check "cert_expired"
