@membership @cap-membership @mem-damaged
Feature: Credential files as they go wrong — a damaged CA line (SPEC §18, [C-27])

  Operators paste CA keys between terminals and editors; a paste cut at a multiple of 4 base64
  characters leaves a line that still decodes and still names its key type, but whose key is cut.
  [C-27] 1: such a line of a type the gateway takes makes the file broken (MEM-1: not applied, the
  last good content kept, an ERROR naming the file and the line); only a well-formed line of a type
  the gateway does not take is skipped. Every CA is made by the real ssh-keygen of OpenSSH
  (CONTRACT §12). Gateways heartbeat every second (the suite's setting).

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
