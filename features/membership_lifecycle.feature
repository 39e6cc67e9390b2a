@membership @cap-membership @C-21
Feature: Credential lifecycle — renewals, what a revocation reaches, hosts not yet known, and a gateway's own credential (SPEC §18, [C-21] 2, 6–9, 12)

  The credentials are made by the real ssh-keygen, the files changed the way configuration
  managers change them, and "within 2 seconds" counted from that change, as in membership.feature
  (CONTRACT §12). The probe plays hosts of its own ("x", "y", "z": their keys are theirs only
  through the certificates they carry), and host "d", which every peers file lists with the key
  the suite minted for it and no gateway of which runs: the probe signs its presence and briefs.
  Gateways heartbeat every second, except where a host must be dropped within 2 seconds: there
  every 3 seconds, so that entries left to their ttl could not pass for a drop.

  Background:
    Given a broker
    And a fleet CA "fleet" made by ssh-keygen

  # [C-21] 8: per key, the receiver keeps only the latest valid certificate it saw. The renewed
  # certificate's serial is revoked, the first one's is not: a receiver that kept both would keep
  # the host. "Applied" is judged by the roster's order ([C-10]): a presence of host "probe"
  # published after the renewal was seen on the wire, and listed everywhere.
  @MEM-4 @MEM-2 @c21-renewal
  Scenario: a host that renewed its certificate over the same key is dropped within 2 seconds once its current serial is revoked
    Given the gateways' heartbeat is 3 seconds
    And every gateway trusts the CA "fleet"
    And every gateway reads a revocation list
    And host "b" holds a certificate from "fleet" and is in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And the probe watches the wire
    When "b" renews its certificate from "fleet" over the same key
    Then within 2 heartbeats the probe sees host "b" carry its renewed certificate in its _gateway presence
    And every gateway has applied what its roster queue held before now
    When the certificate of "b" is revoked by its serial in every revocation list
    Then within 2 seconds the roster of "a" lists nothing of host "b"
    And within 2 seconds the gateway on "b" answers /readyz 503, and still does over a window
    When the probe publishes a REPLY from "w1" to "lead" signed with the key of "b"
    Then the gateway of "lead" dead-letters it with x-death reason "rejected"
    And the gateway of "lead" logs the rejection naming the check "revoked"

  # [C-21] 6: `serial:` and `id:` revoke a certificate, not its key.
  @MEM-4 @MEM-1 @c21-pinned
  Scenario Outline: a certificate revoked by <entry> leaves its key valid where the peers files list it: the host stays listed and its briefs are injected
    Given every gateway trusts the CA "fleet"
    And every gateway reads a revocation list
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    And the probe watches the wire
    When the probe, as host "d", carries a certificate from "fleet" in its _gateway presence
    And the probe, as host "d", publishes the presence of "d1"
    Then within 2 heartbeats every roster lists "d1" on host "d"
    When the certificate of "d" is revoked by <entry> in every revocation list
    Then every roster keeps listing "d1" on host "d" for 2 seconds after the change and a window beyond
    And a brief from "d1", signed by the probe as host "d", is injected into "w1"
    And over 2 heartbeats no gateway dead-letters anything of host "d"

    Examples:
      | entry       |
      | its serial  |
      | its key id  |

  # [C-21] 6: a `key:` line naming a CA key revokes every certificate that CA signed, and only those.
  @MEM-4 @c21-ca-key
  Scenario: a key line naming the fleet CA's public key revokes every certificate it signed, and no other CA's
    Given the gateways' heartbeat is 3 seconds
    And every gateway trusts the CAs "fleet" and "other"
    And every gateway reads a revocation list
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    And the probe watches the wire
    When the probe, as host "x", carries a certificate from "fleet" in its _gateway presence
    And the probe, as host "x", publishes the presence of "x1"
    And the probe, as host "y", carries a certificate from "fleet" in its _gateway presence
    And the probe, as host "y", publishes the presence of "y1"
    And the probe, as host "z", carries a certificate from "other" in its _gateway presence
    And the probe, as host "z", publishes the presence of "z1"
    Then within 2 heartbeats every roster lists "x1" on host "x"
    And within 2 heartbeats every roster lists "y1" on host "y"
    And within 2 heartbeats every roster lists "z1" on host "z"
    When the public key of the CA "fleet" is revoked in every revocation list
    Then within 2 seconds every roster lists nothing of host "x"
    And within 2 seconds every roster lists nothing of host "y"
    And every roster keeps listing "z1" on host "z" for 2 seconds after the change and a window beyond
    When the probe, as host "x", sends "w1" a brief from "x1"
    Then the gateway of "w1" dead-letters it with x-death reason "rejected"
    And the gateway of "w1" logs the rejection naming the check "revoked"
    And nothing hostile was injected into "w1" or held for "lead"

  # [C-21] 6: serials apply across every CA of the trust file (unlike `ssh-keygen -k -s ca`).
  @MEM-4 @c21-serials
  Scenario: a serial line revokes the certificates of that serial from every trusted CA, and no other serial
    Given the gateways' heartbeat is 3 seconds
    And every gateway trusts the CAs "fleet" and "other"
    And every gateway reads a revocation list
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And the probe watches the wire
    When the probe, as host "x", carries a certificate from "fleet" with serial 4242 in its _gateway presence
    And the probe, as host "x", publishes the presence of "x1"
    And the probe, as host "y", carries a certificate from "other" with serial 4242 in its _gateway presence
    And the probe, as host "y", publishes the presence of "y1"
    And the probe, as host "z", carries a certificate from "other" with serial 4243 in its _gateway presence
    And the probe, as host "z", publishes the presence of "z1"
    Then within 2 heartbeats every roster lists "x1" on host "x"
    And within 2 heartbeats every roster lists "y1" on host "y"
    And within 2 heartbeats every roster lists "z1" on host "z"
    When serial 4242 is revoked in every revocation list
    Then within 2 seconds every roster lists nothing of host "x"
    And within 2 seconds every roster lists nothing of host "y"
    And every roster keeps listing "z1" on host "z" for 2 seconds after the change and a window beyond

  # [C-21] 7: a PRESENCE from a host the receiver holds no key for waits for that host's next
  # _gateway presence (at most H), then is verified — or dropped, never dead-lettered.
  @MEM-2 @c21-waits
  Scenario: an entity's presence that arrives before its host's certificate is held, then listed once the certificate comes
    Given every gateway trusts the CA "fleet"
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    And the probe watches the wire
    When the probe, as host "x", publishes the presence of "x1"
    And the probe, as host "x", carries a certificate from "fleet" in its _gateway presence
    Then within 2 heartbeats every roster lists "x1" on host "x"
    And over 3 heartbeats no gateway dead-letters anything of host "x"
    And the probe, as host "x", gets a brief from "x1" injected into "w1"

  @MEM-2 @c21-dropped
  Scenario: an entity's presence from a host that shows no key within a heartbeat is dropped without a dead letter
    Given every gateway trusts the CA "fleet"
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And the probe watches the wire
    When the probe, as host "y", publishes the presence of "y1"
    Then over a window no roster lists anything of host "y"
    And over 3 heartbeats no gateway dead-letters anything of host "y"
    # More than a heartbeat later: "y1" was dropped, not held for ever.
    When the probe, as host "y", carries a certificate from "fleet" in its _gateway presence
    And the probe, as host "y", publishes the presence of "y2"
    Then within 2 heartbeats every roster lists "y2" on host "y"
    And over a window no roster lists "y1" on host "y"

  # A receiver that just started holds no key for hosts whose _gateway presence it has not seen
  # yet: their entities' presence (a registration, a host that heartbeats each entity) waits.
  @MEM-2 @MEM-5 @c21-started
  Scenario: a gateway started while certified hosts run lists them, and dead-letters none of their presence
    Given every gateway trusts the CA "fleet"
    And hosts "a" and "b" hold certificates from "fleet" and are in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And the probe watches the wire
    When the probe, as host "x", carries a certificate from "fleet" in its _gateway presence
    And the probe, as host "x", publishes the presence of "x1"
    Then within 2 heartbeats every roster lists "x1" on host "x"
    When host "c", in no peers file and holding a certificate from "fleet", joins with a main "late"
    And "w2" registers on "b" as a worker whose parent is "late"
    And the probe, as host "x", publishes the presence of "x2"
    And the probe, as host "x", heartbeats its _gateway presence
    Then within 2 heartbeats every roster lists "lead" on host "a"
    And within 2 heartbeats every roster lists "w1" on host "b"
    And within 2 heartbeats every roster lists "w2" on host "b"
    And within 2 heartbeats every roster lists "x2" on host "x"
    And over 5 heartbeats no gateway dead-letters a PRESENCE

  # [C-21] 2: a _gateway presence that verifies under a key the receiver already holds applies,
  # whatever certificate it carries (a bad one is then ignored).
  @MEM-2 @c21-held-key
  Scenario Outline: a _gateway presence signed with a key already held applies whatever certificate it carries: <credential>
    Given every gateway trusts the CA "fleet"
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    And the probe watches the wire
    When the probe, as host "x", presents a valid certificate from "fleet" in its _gateway presence
    And the probe, as host "x", announces "x1"
    Then within 2 heartbeats every roster lists "x1" on host "x"
    When the probe, as host "x", presents <credential> in its _gateway presence
    Then over 3 heartbeats no gateway dead-letters anything of host "x"
    And every roster still lists "x1" on host "x" over a window
    And the probe, as host "x", gets a brief from "x1" injected into "w1"

    Examples:
      | credential                                  |
      | a certificate from a CA no gateway trusts   |
      | a certificate from "fleet" that has expired |
      | a certificate from "fleet" over another key |
      | a garbage certificate                       |

  # [C-21] 9 with CONTRACT §3: a `revoked` or `cert_expired` failure says the gateway refused to
  # publish — judged whatever the gateway declares: what it said it did not send is never on the
  # wire nor delivered. A gateway that sends anyway is not judged here (its receivers reject it).
  @MEM-4 @c21-refusal-definite
  Scenario Outline: a gateway whose own certificate is <state> never sends what it answered <reason>
    Given the gateways' heartbeat is 3 seconds
    And the gateways' inject bound is 5 seconds
    And every gateway trusts the CA "fleet"
    And every gateway reads a revocation list
    And the gateways allow a clock skew of 1 second
    And host "b" holds a certificate from "fleet" valid for <valid> more seconds, and is in no peers file
    And host "b" runs a gateway with a main "boss"
    And host "a" runs a gateway with a main "lead"
    And host "a" also runs a worker "wa" whose parent is "boss"
    And host "b" also runs a worker "w1" whose parent is "lead"
    And "wa" is idle
    And the probe watches the wire
    When the certificate of "b" <change>
    Then within 2 seconds the gateway on "b" answers /readyz 503, and still does over a window
    When "boss" sends "sent with a dead credential" to "wa"
    And "w1" starts replying "replied with a dead credential"
    Then whatever "boss"'s send and "w1"'s reply answer, one that failed with reason "<reason>" was never on the wire

    Examples:
      | state   | reason       | valid | change                                            |
      | revoked | revoked      | 3600  | is revoked by its serial in every revocation list |
      | expired | cert_expired | 20    | expires                                           |

  # [C-21] 9, a SHOULD (capability own-credential-refusal, CONTRACT §3 and §12).
  @MEM-4 @cap-own-credential-refusal @c21-refusal
  Scenario Outline: a gateway whose own certificate is <state> refuses to publish: bridge_send and bridge_reply fail <reason>, and nothing goes out
    Given the gateways' heartbeat is 3 seconds
    And the gateways' inject bound is 5 seconds
    And every gateway trusts the CA "fleet"
    And every gateway reads a revocation list
    And the gateways allow a clock skew of 1 second
    And host "b" holds a certificate from "fleet" valid for <valid> more seconds, and is in no peers file
    And host "b" runs a gateway with a main "boss"
    And host "a" runs a gateway with a main "lead"
    And host "a" also runs a worker "wa" whose parent is "boss"
    And host "b" also runs a worker "w1" whose parent is "lead"
    And "wa" is idle
    And the probe watches the wire
    When the certificate of "b" <change>
    Then within 2 seconds the gateway on "b" answers /readyz 503, and still does over a window
    When "boss" sends "sent with a dead credential" to "wa"
    And "w1" starts replying "replied with a dead credential"
    Then the send returns "failed" with reason "<reason>" within the inject bound
    And the reply returns "failed" with reason "<reason>" within the inject bound
    And whatever "boss"'s send and "w1"'s reply answer, one that failed with reason "<reason>" was never on the wire

    Examples:
      | state   | reason       | valid | change                                            |
      | revoked | revoked      | 3600  | is revoked by its serial in every revocation list |
      | expired | cert_expired | 20    | expires                                           |

  # [C-21] 12: a gateway checks its own credential as its peers would, at every rotation.
  @MEM-3 @c21-own-rotation
  Scenario Outline: a rotation to a certificate the fleet would reject (<defect>) is refused, and the gateway keeps its old pair
    Given every gateway trusts the CA "fleet"
    And every gateway reads a revocation list revoking serial 900
    And hosts "a" and "b" hold certificates from "fleet" and are in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" finishes each brief quickly
    And the probe watches the wire
    When "lead" sends briefs to "w1", which replies to each, in the background
    And "b" rotates to a new key and a certificate the fleet would reject: <certificate>
    Then within 2 seconds the gateway on "b" logs an ERROR naming its certificate file
    When the traffic has made 3 more round trips and stops
    Then the traffic lost nothing, and nothing was rejected or duplicated
    And every message "b" published since the refused rotation is signed with its old key

    Examples:
      | defect              | certificate                                  |
      | CA not trusted      | one from a CA no gateway trusts              |
      | revoked             | one from "fleet" with serial 900             |
      | not yet valid       | one from "fleet" not yet valid               |
      | expired             | one from "fleet" that has expired            |
      | host not principal  | one from "fleet" naming host "a" only        |

  # [C-21] 12: started with such a certificate, a gateway says so and is never ready — it neither
  # runs silently shut out nor exits.
  @MEM-4 @MEM-2 @c21-own-start
  Scenario Outline: a gateway started with a certificate the fleet would reject (<defect>) logs an ERROR naming it and is never ready
    Given every gateway trusts the CA "fleet"
    And every gateway reads a revocation list revoking serial 900
    When host "c", in no peers file, starts a gateway holding a certificate the fleet would reject: <certificate>
    Then within 10 seconds of its start the gateway on "c" logs an ERROR naming its certificate file
    And the gateway on "c" answers /readyz 503, never 200, over 3 heartbeats, and is still running

    Examples:
      | defect              | certificate                                  |
      | CA not trusted      | one from a CA no gateway trusts              |
      | revoked             | one from "fleet" with serial 900             |
      | not yet valid       | one from "fleet" not yet valid               |
      | expired             | one from "fleet" that has expired            |
      | host not principal  | one from "fleet" naming host "a" only        |
