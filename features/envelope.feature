@envelope
Feature: Envelope security — hostile messages are rejected, dead-lettered and never acted on (SPEC §2–3)

  The wire probe holds the key of the trusted host "probe" (pinned in every gateway's peers file)
  and an untrusted key "mallory". It announces host "probe" and a fake entity "p1" on it with
  signed presences, and host "c" (trusted, no entity), so each crafted message below carries
  exactly the one defect its row names; both hosts are heard from, so no gateway holds a message
  claiming them for [C-25]. Every
  gateway must reject such a message to bridge.dlx (x-death reason "rejected"), log at WARN the
  check that failed, never inject it, hold it or report FAILED about it, and keep serving: a valid
  message published right after it is still accepted (queues are FIFO, so that also proves the
  hostile one was handled without wedging the consumer).

  Background:
    Given a broker
    And the gateways' body limit is 65536 bytes
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    And the probe watches the wire
    And the probe announces "p1" on host "probe"
    And the probe announces the gateway of host "c"

  @SIG-5 @SIG-6
  Scenario Outline: <message> sent to <to> is rejected the SIG-5 way
    When the probe publishes "<message>" to "<to>"
    Then the gateway of "<to>" dead-letters it with x-death reason "rejected"
    And the gateway of "<to>" logs the rejection naming the check "<check>"
    And a valid message from "p1" to "<to>" is still accepted
    And nothing hostile was injected into "w1" or held for "lead"
    And no gateway published FAILED
    And every gateway is still ready

    @ENV-2
    Examples: a required header is missing
      | message                  | to   | check    |
      | a SEND without v         | w1   | envelope |
      | a SEND without kind      | w1   | envelope |
      | a SEND without msgId     | w1   | envelope |
      | a SEND without traceId   | lead | envelope |
      | a SEND without from      | lead | envelope |
      | a SEND without to        | w1   | envelope |
      | a SEND without host      | w1   | envelope |
      | a SEND without ts        | lead | envelope |
      | a SEND without expiresAt | w1   | envelope |
      | a SEND without sig       | w1   | envelope |
      | an ASK without turnId    | lead | envelope |
      | a FAILED without corrId  | lead | envelope |

    @ENV-2
    Examples: a presence misses a required header
      | message                  | to         | check    |
      | a PRESENCE without sig   | the roster | envelope |
      | a PRESENCE without msgId | the roster | envelope |

    @ENV-2
    Examples: a header is malformed
      | message                                             | to   | check    |
      | a SEND of kind GOSSIP                               | w1   | envelope |
      | a SEND with v 2                                     | w1   | envelope |
      | a SEND whose msgId is not a UUID                    | w1   | envelope |
      | a SEND whose traceId is uppercase                   | lead | envelope |
      | a SEND whose ts is not a number                     | w1   | envelope |
      | a SEND whose expiresAt is negative                  | lead | envelope |
      | a SEND whose ts gained a leading zero after signing | w1   | envelope |

    @ENV-1 @ENV-2
    Examples: a header holds a newline or is not an AMQP long string
      | message                             | to   | check    |
      | a SEND whose from holds a newline   | w1   | envelope |
      | a SEND whose ts is a 64-bit integer | w1   | envelope |
      | a SEND whose msgId is a table       | lead | envelope |
      | a SEND whose v is a boolean         | w1   | envelope |

    @SIG-1 @SIG-2
    Examples: the signature does not verify under the key of host
      | message                                       | to   | check     |
      | a SEND signed by the untrusted host mallory   | w1   | signature |
      | a SEND from lead forged under host a          | w1   | signature |
      | a FAILED forged to lead about another message | lead | signature |
      | a SEND whose body changed after signing       | w1   | signature |
      | a SEND whose traceId changed after signing    | lead | signature |
      | a SEND whose sig is not base64                | w1   | signature |
      | a SEND carrying the sig of another message    | lead | signature |

    @SIG-2
    Examples: from does not live on host, or to is not the routing key
      | message                                                  | to         | check            |
      | a SEND from a gid that does not live on host probe       | w1         | from_not_on_host |
      | a SEND from p1 signed by host c                          | lead       | from_not_on_host |
      | a SEND whose to is not its routing key                   | w1         | to_mismatch      |
      | a PRESENCE whose from differs from its routing key       | the roster | from_not_on_host |
      | a _gateway PRESENCE signed by the untrusted host mallory | the roster | signature        |

    @SIG-4
    Examples: the message reached an inbox whose owner is not its to
      | message                                                      | to   | check                    |
      | a SEND through the default exchange straight into the inbox  | w1   | to_mismatch or not_owner |
      | a SEND through a rogue binding                               | lead | not_owner                |
      | a BROADCAST to a group it is not in, through a rogue binding | w1   | not_owner                |
      | a BROADCAST to a group it is not in, through a rogue binding | lead | not_owner                |

    @ENV-2 @SIG-4
    Examples: the kind does not belong where it arrived
      | message                  | to   | check      |
      | a SEND to broadcast.all  | w1   | wrong_kind |
      | a SPAWN into an inbox    | lead | wrong_kind |
      | a PRESENCE into an inbox | w1   | from_not_on_host or wrong_kind |

    @SIG-3
    Examples: replay bounds
      | message                                    | to         | check     |
      | an expired SEND                            | w1         | expired   |
      | a SEND stamped 10 minutes ahead            | lead       | future_ts |
      | a replay of a drained SEND                 | lead       | replay    |
      | a replay of a SEND drained 20 messages ago | lead       | replay    |
      | a replayed PRESENCE                        | the roster | replay    |

    @SIG-3 @FWD-6
    Examples: a SEND is deduplicated by msgId before the ack, so a replay is never injected again
      | message                      | to | check  |
      | a replay of an injected SEND | w1 | replay |

    @PRS-3 @SIG-2
    Examples: a presence claim for a gid another host owns
      | message                               | to         | check             |
      | a PRESENCE claiming w1 for host probe | the roster | presence_conflict |

    @SIG-5
    Examples: the body is over the configured limit
      | message                    | to | check     |
      | a SEND over the body limit | w1 | oversized |

  @SIG-2 @SIG-5 @SIG-6 @SPN-2
  Scenario Outline: <message> on the control queue of "b" is rejected and never acted on
    When the probe publishes "<message>" to "the control queue of b"
    Then the gateway of "the control queue of b" dead-letters it with x-death reason "rejected"
    And the gateway of "the control queue of b" logs the rejection naming the check "<check>"
    And herdr on "b" opened no pane and closed none
    And no gateway published FAILED
    And every gateway is still ready

    Examples: a forged SPAWN
      | message                                        | check            |
      | a SPAWN signed by the untrusted host mallory   | signature        |
      | a SPAWN from an entity not present on its host | from_not_on_host |

    @cap-stop @SPN-5
    Examples: a forged STOP of a live worker
      | message                                                | check            |
      | a STOP for w1 signed by the untrusted host mallory     | signature        |
      | a STOP for w1 from an entity not present on its host   | from_not_on_host |

  @ASK-3
  Scenario: an ASK that reaches the main's gateway after its expiresAt is acked and dropped, never surfaced
    When the probe sends "lead" an ASK from "p1" that expired a minute ago
    Then a valid message from "p1" to "lead" is still accepted
    And nothing hostile was injected into "w1" or held for "lead"
    And the late ASK was acked and dropped: never dead-lettered, never answered

  @SIG-2 @ENV-3 @SIG-1
  Scenario: a valid message from the probe host is injected, and its INJECTED is signed and keeps the traceId
    When "p1" on the probe host sends a valid message to "w1"
    Then the INJECTED for the probe's message carries its msgId as corrId and its traceId
    And nothing hostile was injected into "w1" or held for "lead"
    And no gateway published FAILED

  @SIG-2 @RPL-1
  Scenario: a valid message from the probe host to a main is held and drained
    When "p1" on the probe host sends a valid message to "lead"
    Then nothing hostile was injected into "w1" or held for "lead"
    And the roster of every gateway still lists "w1" on host "b"

  @ENV-1 @SIG-1 @ENV-3
  Scenario: every message a gateway publishes carries every required header as a long string and a valid signature
    When "lead" sends "review the envelope code" to "w1"
    Then herdr on "b" records exactly 1 inject into "w1" with text "review the envelope code"
    And the send returns "injected" within 10 seconds
    When "w1" replies "looks good"
    Then the probe saw host "a" publish a SEND from "lead", complete, in long strings, signed with its key
    And the probe saw host "b" publish an INJECTED from "w1", complete, in long strings, signed with its key
    And the probe saw host "b" publish a REPLY from "w1", complete, in long strings, signed with its key
    And the probe saw host "b" publish a PRESENCE for "w1", complete, in long strings, signed with its key
    And the probe saw host "a" publish a PRESENCE for "_gateway", complete, in long strings, signed with its key
    And the INJECTED for "lead"'s send carries the send's traceId
    And every message the probe saw a gateway publish is complete, in long strings, and signed
