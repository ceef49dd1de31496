#include "worker/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <numeric>

#include "common/random.h"

namespace fullband::worker {

StatusOr<TokenFile> TokenFile::Open(const std::string& path, int64_t vocab_size, int64_t seq_len) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return NotFoundError("cannot open token file " + path + ": " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return InternalError("stat " + path + ": " + std::strerror(errno));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes % 4 != 0) {
    ::close(fd);
    return DataLossError("token file " + path + ": " + std::to_string(bytes) +
                         " bytes is not a whole number of uint32 ids");
  }
  if (static_cast<int64_t>(bytes / 4) < seq_len + 1) {
    ::close(fd);
    return InvalidArgumentError("token file " + path + " holds " + std::to_string(bytes / 4) +
                                " tokens, fewer than one sequence of " +
                                std::to_string(seq_len + 1));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return InternalError("mmap " + path + ": " + std::strerror(errno));
  TokenFile file(path, static_cast<const uint32_t*>(p), bytes, seq_len);
  for (int64_t i = 0; i < file.num_tokens_; ++i) {
    if (file.data_[i] >= static_cast<uint64_t>(vocab_size)) {
      return DataLossError("token file " + path + ": token " + std::to_string(i) + " is " +
                           std::to_string(file.data_[i]) + ", outside the vocabulary [0, " +
                           std::to_string(vocab_size) + ")");
    }
  }
  return file;
}

TokenFile::TokenFile(std::string path, const uint32_t* data, size_t bytes, int64_t seq_len)
    : path_(std::move(path)),
      data_(data),
      bytes_(bytes),
      num_tokens_(static_cast<int64_t>(bytes / 4)),
      seq_len_(seq_len) {}

TokenFile::TokenFile(TokenFile&& o) noexcept
    : path_(std::move(o.path_)),
      data_(o.data_),
      bytes_(o.bytes_),
      num_tokens_(o.num_tokens_),
      seq_len_(o.seq_len_),
      order_epoch_(o.order_epoch_),
      order_seed_(o.order_seed_),
      order_(std::move(o.order_)) {
  o.data_ = nullptr;
}

TokenFile::~TokenFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint32_t*>(data_), bytes_);
}

int64_t TokenFile::SequenceAt(uint64_t seed, int64_t epoch, int64_t pos) {
  if (epoch != order_epoch_ || seed != order_seed_) {
    order_.resize(num_sequences());
    std::iota(order_.begin(), order_.end(), 0);
    Rng rng(seed ^ (static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ull));
    for (int64_t i = static_cast<int64_t>(order_.size()) - 1; i > 0; --i) {
      std::swap(order_[i], order_[rng.Below(static_cast<uint64_t>(i) + 1)]);
    }
    order_epoch_ = epoch;
    order_seed_ = seed;
  }
  return order_[pos];
}

void TokenFile::ReadBatch(uint64_t seed, int64_t cursor, int64_t batch, int32_t* out) {
  const int64_t n = num_sequences();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t position = cursor + b;
    const int64_t seq = SequenceAt(seed, position / n, position % n);
    const uint32_t* src = data_ + seq * seq_len_;
    for (int64_t t = 0; t <= seq_len_; ++t)
      out[b * (seq_len_ + 1) + t] = static_cast<int32_t>(src[t]);
  }
}

}  // namespace fullband::worker
