@membership @cap-membership @mem-edges
Feature: Membership edges — a serial range's ends, key ids across CAs, principals compared exactly, and SIGHUP alone (SPEC §18 MEM-1..4, [C-21])

  What a gateway could get wrong and still pass the other membership features. Credentials are
  made by the real ssh-keygen, files changed as configuration managers change them, "within 2
  seconds" counted from the change or the signal (CONTRACT §12). The probe plays hosts of its own
  ("x", "y", …: their keys are theirs only through the certificates they carry). Gateways
  heartbeat every 3 seconds where a host must be dropped within 2 seconds, so that entries left to
  their ttl could not pass for a drop.

  Background:
    Given a broker
    And a fleet CA "fleet" made by ssh-keygen

  # MEM-4: `serial: N-M` revokes N, M and every serial between, and nothing beside them.
  @MEM-4 @mem-edges-range
  Scenario: a serial range revokes the certificates at both its ends, and none of the serials just outside it
    Given the gateways' heartbeat is 3 seconds
    And every gateway trusts the CA "fleet"
    And every gateway reads a revocation list
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And the probe watches the wire
    When the probe, as host "below", carries a certificate from "fleet" with serial 4240 in its _gateway presence
    And the probe, as host "below", publishes the presence of "below1"
    And the probe, as host "low", carries a certificate from "fleet" with serial 4241 in its _gateway presence
    And the probe, as host "low", publishes the presence of "low1"
    And the probe, as host "high", carries a certificate from "fleet" with serial 4243 in its _gateway presence
    And the probe, as host "high", publishes the presence of "high1"
    And the probe, as host "above", carries a certificate from "fleet" with serial 4244 in its _gateway presence
    And the probe, as host "above", publishes the presence of "above1"
    Then within 2 heartbeats every roster lists "below1" on host "below"
    And within 2 heartbeats every roster lists "low1" on host "low"
    And within 2 heartbeats every roster lists "high1" on host "high"
    And within 2 heartbeats every roster lists "above1" on host "above"
    When serials 4241-4243 are revoked in every revocation list
    Then within 2 seconds every roster lists nothing of host "low"
    And within 2 seconds every roster lists nothing of host "high"
    And every roster keeps listing "below1" on host "below" for 2 seconds after the change and a window beyond
    And every roster keeps listing "above1" on host "above" for 2 seconds after the change and a window beyond

  # MEM-4 / [C-21] 6: ids apply to the certificates of every CA of the trust file. Two CAs'
  # certificates share key id "twin-77"; a third, of the second CA, has another id and the same
  # serial (an id line revokes by id, not by serial).
  @MEM-4 @mem-edges-ids
  Scenario: an id line revokes the certificates with that key id from every trusted CA, and no other key id
    Given the gateways' heartbeat is 3 seconds
    And every gateway trusts the CAs "fleet" and "other"
    And every gateway reads a revocation list
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And the probe watches the wire
    When the probe, as host "x", holds a certificate from "fleet" with key id "twin-77"
    And the probe, as host "x", heartbeats its _gateway presence
    And the probe, as host "x", publishes the presence of "x1"
    And the probe, as host "y", holds a certificate from "other" with key id "twin-77"
    And the probe, as host "y", heartbeats its _gateway presence
    And the probe, as host "y", publishes the presence of "y1"
    And the probe, as host "z", holds a certificate from "other" with key id "solo-77"
    And the probe, as host "z", heartbeats its _gateway presence
    And the probe, as host "z", publishes the presence of "z1"
    Then within 2 heartbeats every roster lists "x1" on host "x"
    And within 2 heartbeats every roster lists "y1" on host "y"
    And within 2 heartbeats every roster lists "z1" on host "z"
    When the key id "twin-77" is revoked in every revocation list
    Then within 2 seconds every roster lists nothing of host "x"
    And within 2 seconds every roster lists nothing of host "y"
    And every roster keeps listing "z1" on host "z" for 2 seconds after the change and a window beyond

  # MEM-2 with CONTRACT §12: "the host id among its principals" is an exact comparison — no
  # prefix of either, no case folding (SPEC §1's host ids are lower case).
  @MEM-2 @SIG-5 @mem-edges-principal
  Scenario Outline: a host presenting a certificate whose only principal is <principal> is never let in
    Given every gateway trusts the CA "fleet"
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    And the probe watches the wire
    When the probe, as host "<host>", presents a certificate from "fleet" naming host "<named>" in its _gateway presence
    Then the gateway of "the roster" dead-letters it with x-death reason "rejected"
    And the gateway of "the roster" logs the rejection naming the check "certificate or signature"
    And every gateway's line rejecting it names host "<host>"
    When the probe, as host "<host>", announces "e1"
    And the probe, as host "<host>", sends "w1" a brief from "e1"
    Then the gateway of "w1" dead-letters it with x-death reason "rejected"
    And the gateway of "w1" logs the rejection naming the check "certificate or signature"
    And over a window no roster lists anything of host "<host>"
    And nothing hostile was injected into "w1" or held for "lead"

    Examples:
      | principal                                   | host | named |
      | the host id with more after it              | x    | x2    |
      | the start of the host id                    | x2   | x     |
      | the host id in upper case                   | x    | X     |

  # CONTRACT §12: a certificate with no principals at all (ssh-keygen without -n) names no host.
  # OpenSSH reads it as valid for any host; MEM-2 asks for the host among its principals.
  @MEM-2 @SIG-5 @mem-edges-principal
  Scenario: a host presenting a certificate with no principals at all is never let in
    Given every gateway trusts the CA "fleet"
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    And the probe watches the wire
    When the probe, as host "x", presents a certificate from "fleet" naming no host in its _gateway presence
    Then the gateway of "the roster" dead-letters it with x-death reason "rejected"
    And the gateway of "the roster" logs the rejection naming the check "certificate or signature"
    And every gateway's line rejecting it names host "x"
    When the probe, as host "x", announces "e1"
    And the probe, as host "x", sends "w1" a brief from "e1"
    Then the gateway of "w1" dead-letters it with x-death reason "rejected"
    And the gateway of "w1" logs the rejection naming the check "certificate or signature"
    And over a window no roster lists anything of host "x"
    And nothing hostile was injected into "w1" or held for "lead"

  @MEM-2 @mem-edges-principals
  Scenario: a host certificate naming several hosts, this one among them but not first, lets the host in
    Given every gateway trusts the CA "fleet"
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    And the probe watches the wire
    When the probe, as host "x", holds a certificate from "fleet" naming hosts "v", "x" and "y"
    And the probe, as host "x", heartbeats its _gateway presence
    And the probe, as host "x", publishes the presence of "x1"
    Then within 2 heartbeats every roster lists "x1" on host "x"
    And the probe, as host "x", gets a brief from "x1" injected into "w1"

  # MEM-3 "on SIGHUP", alone: the rotation was refused while its CA was untrusted ([C-21] 12);
  # then the CA is trusted everywhere; the key and certificate files never change again. A gateway
  # may take the pair when the trust file changes (not judged: CONTRACT §12); on SIGHUP it must.
  @MEM-3 @MEM-1 @mem-edges-sighup
  Scenario: a rotation refused while its CA was untrusted is taken on SIGHUP alone once every trust file lists that CA
    Given every gateway trusts the CA "fleet"
    And hosts "a" and "b" hold certificates from "fleet" and are in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" finishes each brief quickly
    And the probe watches the wire
    When "lead" sends briefs to "w1", which replies to each, in the background
    And "b" rotates to a new key and a certificate from "later", a CA no gateway trusts yet
    Then within 2 seconds the gateway on "b" logs an ERROR naming its certificate file
    When the CA "later" is added to every trust file
    Then within 2 seconds every gateway lets in host "x", certified by "later"
    When the gateway on "b" is sent SIGHUP, its key and certificate files unchanged since
    Then within 2 seconds of the signal the probe sees host "b" carry its new certificate in a _gateway presence signed with its new key
    And within 2 heartbeats the probe sees host "b" sign a REPLY and an INJECTED with its new key
    And the first message "b" signed with its new key is its _gateway presence carrying the new certificate
    When the traffic has made 3 more round trips and stops
    Then the traffic lost nothing, and nothing was rejected or duplicated
