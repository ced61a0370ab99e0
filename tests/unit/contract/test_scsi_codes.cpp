// contract/scsi_codes.h: the SPC/SBC values both sides use (opcodes, status bytes, sense keys, ASC/ASCQ), which
// opcodes are READs, WRITEs and WRITE AND VERIFYs, which carry data a status LU takes as control lines, and the FUA
// bit of a WRITE's CDB.
#include <gtest/gtest.h>

#include <cstdint>

#include "contract/scsi_codes.h"

namespace blockps::scsi {
namespace {

TEST(ScsiCodes, TheStandardsValues) {
  EXPECT_EQ(kRead10, 0x28);
  EXPECT_EQ(kWrite16, 0x8a);
  EXPECT_EQ(kWriteVerify10, 0x2e);
  EXPECT_EQ(kSynchronizeCache10, 0x35);
  EXPECT_EQ(kGood, 0x00);
  EXPECT_EQ(kCheckCondition, 0x02);
  EXPECT_EQ(kReservationConflict, 0x18);
  EXPECT_EQ(kIllegalRequest, 0x05);
  EXPECT_EQ(kUnitAttention, 0x06);
  EXPECT_EQ(kAbortedCommand, 0x0b);
  EXPECT_EQ(kAscLbaOutOfRange, 0x2100);
  EXPECT_EQ(kAscNotReadyManualIntervention, 0x0403);  // ASC 04h, ASCQ 03h
  EXPECT_EQ(kAscReportedLunsDataHasChanged, 0x3f0e);
}

TEST(ScsiCodes, ReadsWritesAndWriteVerifiesOfEverySize) {
  for (int op = 0; op < 256; ++op) {
    const auto o = static_cast<std::uint8_t>(op);
    const bool read = o == 0x08 || o == 0x28 || o == 0xa8 || o == 0x88;
    const bool write = o == 0x0a || o == 0x2a || o == 0xaa || o == 0x8a;
    const bool write_verify = o == 0x2e || o == 0xae || o == 0x8e;
    EXPECT_EQ(is_read(o), read) << std::hex << op;
    EXPECT_EQ(is_write(o), write) << std::hex << op;
    EXPECT_EQ(is_write_verify(o), write_verify) << std::hex << op;
    EXPECT_EQ(writes_data(o), write || write_verify) << std::hex << op;
  }
  // Commands that carry data but are no WRITE of it: not control lines.
  EXPECT_FALSE(writes_data(kWriteSame10));
  EXPECT_FALSE(writes_data(kWriteSame16));
  EXPECT_FALSE(writes_data(kOrWrite16));
  EXPECT_FALSE(writes_data(kVerify10));
}

TEST(ForcesUnitAccess, Byte1Bit3OfEveryWriteButWrite6) {
  for (std::uint8_t op : {kWrite10, kWrite12, kWrite16, kWriteVerify10, kWriteVerify16}) {
    std::uint8_t cdb[16] = {op, 0x08};
    EXPECT_TRUE(forces_unit_access(cdb)) << std::hex << int{op};
    cdb[1] = 0xf7;  // every bit but FUA
    EXPECT_FALSE(forces_unit_access(cdb)) << std::hex << int{op};
    cdb[1] = 0;
    EXPECT_FALSE(forces_unit_access(cdb)) << std::hex << int{op};
  }
  // WRITE(6)'s byte 1 holds LBA bits, not FUA.
  const std::uint8_t write6[6] = {kWrite6, 0x08};
  EXPECT_FALSE(forces_unit_access(write6));
}

}  // namespace
}  // namespace blockps::scsi
