// over 600 lines: the emitter is one class whose methods mirror the SIMT IR node by node (one
// LLVM IR sequence per statement kind); split, each half would need the whole emitter state.
#include "compiler/codegen/cpu_codegen.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <functional>
#include <map>

#include "compiler/base/check.h"
#include "compiler/codegen/gemm_desc.h"
#include "compiler/codegen/tma_model.h"
#include "compiler/ir/ir_printer.h"
#include "compiler/ir/ir_visitor.h"
#include "tilerun/error.h"

namespace tilerun::compiler {

CpuModule::CpuModule() = default;
CpuModule::CpuModule(CpuModule&&) noexcept = default;
CpuModule::~CpuModule() {
  module.reset();  // before the context that owns its types
  context.reset();
}

namespace {

class CpuCodegen {
 public:
  CpuCodegen(const SimtKernel& k, llvm::LLVMContext& ctx, llvm::Module& m)
      : k_(k), ctx_(ctx), m_(m), b_(ctx) {}

  int64_t run() {
    llvm::Type* ptr = b_.getPtrTy();
    llvm::Type* i64 = b_.getInt64Ty();
    auto* fn_type = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, ptr, ptr, i64, i64}, false);
    fn_ = llvm::Function::Create(fn_type, llvm::Function::ExternalLinkage, kCpuEntryName, m_);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    const char* arg_names[] = {"buffers", "dims", "scalars", "grid", "block_begin", "block_end"};
    for (unsigned i = 0; i < 6; ++i) fn_->getArg(i)->setName(arg_names[i]);
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));

    bind_parameters();
    int64_t storage_bytes = allocate_block_storage();

    llvm::Value* g0 = load_i64(fn_->getArg(3), 0, "grid.x");
    llvm::Value* g1 = load_i64(fn_->getArg(3), 1, "grid.y");
    emit_loop("block", fn_->getArg(4), b_.CreateSub(fn_->getArg(5), fn_->getArg(4)),
              [&](llvm::Value* blk) {
                // x fastest: block = x + g0 * (y + g1 * z).
                scope_[kBlockIdx[0]] = b_.CreateSRem(blk, g0, kBlockIdx[0]);
                llvm::Value* rest = b_.CreateSDiv(blk, g0);
                scope_[kBlockIdx[1]] = b_.CreateSRem(rest, g1, kBlockIdx[1]);
                scope_[kBlockIdx[2]] = b_.CreateSDiv(rest, g1, kBlockIdx[2]);
                emit_block_level(k_.body);
              });
    b_.CreateRetVoid();
    return storage_bytes;
  }

 private:
  // ---- Parameters and storage.

  llvm::Value* load_i64(llvm::Value* base, int64_t i, const std::string& name) {
    llvm::Value* p = b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), base, i);
    return b_.CreateLoad(b_.getInt64Ty(), p, name);
  }

  void bind_parameters() {
    const KernelSignature& sig = k_.sig;
    for (size_t i = 0; i < sig.buffers.size(); ++i) {
      llvm::Value* p = b_.CreateConstInBoundsGEP1_64(b_.getPtrTy(), fn_->getArg(0), i);
      buffer_ptr_[sig.buffers[i].name] = b_.CreateLoad(b_.getPtrTy(), p, sig.buffers[i].name);
    }
    for (size_t i = 0; i < sig.dims.size(); ++i)
      scope_[sig.dims[i].name] = load_i64(fn_->getArg(1), i, sig.dims[i].name);
    for (size_t i = 0; i < sig.scalars.size(); ++i) {
      llvm::Value* p = b_.CreateConstInBoundsGEP1_64(b_.getDoubleTy(), fn_->getArg(2), i);
      llvm::Value* d = b_.CreateLoad(b_.getDoubleTy(), p);
      const ScalarParam& s = sig.scalars[i];
      // The launcher passes doubles; f32 rounds to nearest even, ints are exact below 2^53.
      scope_[s.name] = s.type == Type::F32 ? b_.CreateFPTrunc(d, b_.getFloatTy(), s.name)
                                           : b_.CreateFPToSI(d, llvm_type(s.type), s.name);
    }
  }

  // Shared arrays, then per-thread slots for local arrays and locals: 64-byte aligned stack
  // arrays in the entry block, so they exist once per call and are reused by every block.
  int64_t allocate_block_storage() {
    int64_t total = 0;
    const int64_t threads = k_.sig.threads;
    auto place = [&](const std::string& name, llvm::Type* elem, int64_t count) {
      total += count * static_cast<int64_t>(m_.getDataLayout().getTypeAllocSize(elem)) + 64;
      llvm::AllocaInst* a = b_.CreateAlloca(elem, b_.getInt64(count), name);
      a->setAlignment(llvm::Align(64));
      return a;
    };
    for (const SimtArray& a : k_.shared)
      array_ptr_[a.name] = place(a.name, llvm_type(storage_type(a.dtype)), a.size());
    for (const SimtArray& a : k_.local_arrays) {
      array_ptr_[a.name] = place(a.name, llvm_type(storage_type(a.dtype)), threads * a.size());
      local_array_size_[a.name] = a.size();
    }
    for (const SimtLocal& l : k_.locals) {
      local_slot_[l.name] = place(l.name, llvm_type(l.type), threads);
      local_type_[l.name] = l.type;
    }
    if (total > kCpuBlockStorageLimit)
      throw Error("kernel '" + k_.sig.name + "' needs " + std::to_string(total) +
                      " bytes of shared memory and per-thread storage per block; the CPU "
                      "backend allows " +
                      std::to_string(kCpuBlockStorageLimit),
                  ErrorKind::Runtime);
    return total;
  }

  llvm::Type* llvm_type(Type t) {
    switch (t) {
      case Type::Bool:
        return b_.getInt1Ty();
      case Type::I8:
        return b_.getInt8Ty();
      case Type::I16:
        return b_.getInt16Ty();
      case Type::I32:
        return b_.getInt32Ty();
      case Type::I64:
        return b_.getInt64Ty();
      case Type::F32:
        return b_.getFloatTy();
    }
    return nullptr;
  }

  // ---- Control flow.

  // for (v = min; v < min + extent; ++v) body(v), in i64.
  void emit_loop(const std::string& name, llvm::Value* min, llvm::Value* extent,
                 const std::function<void(llvm::Value*)>& body) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    llvm::BasicBlock* header = llvm::BasicBlock::Create(ctx_, name + ".header", fn_);
    llvm::BasicBlock* loop = llvm::BasicBlock::Create(ctx_, name + ".body", fn_);
    llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx_, name + ".exit", fn_);
    llvm::Value* end = b_.CreateAdd(min, extent, name + ".end");
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode* v = b_.CreatePHI(b_.getInt64Ty(), 2, name);
    v->addIncoming(min, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(v, end), loop, exit);
    b_.SetInsertPoint(loop);
    body(v);
    llvm::Value* next = b_.CreateAdd(v, b_.getInt64(1), name + ".next");
    v->addIncoming(next, b_.GetInsertBlock());
    b_.CreateBr(header);
    b_.SetInsertPoint(exit);
  }

  // Binds `name` for the duration of `fn`, restoring any outer binding after.
  void with_binding(const std::string& name, llvm::Value* v, const std::function<void()>& fn) {
    auto it = scope_.find(name);
    llvm::Value* saved = it == scope_.end() ? nullptr : it->second;
    scope_[name] = v;
    fn();
    if (saved) {
      scope_[name] = saved;
    } else {
      scope_.erase(name);
    }
  }

  // Block level: statements that contain barriers. Everything barrier-free between them runs
  // in one loop over the threads.
  void emit_block_level(const Stmt& s) {
    if (!contains_barrier(s)) return emit_thread_loop(s);
    if (const Seq* seq = s.as<Seq>()) {
      std::vector<Stmt> run;
      auto flush = [&] {
        if (!run.empty()) emit_thread_loop(Seq::make(run));
        run.clear();
      };
      for (const Stmt& c : seq->stmts) {
        if (contains_barrier(c)) {
          flush();
          emit_block_level(c);
        } else {
          run.push_back(c);
        }
      }
      flush();
    } else if (s.as<Barrier>()) {
      // The end of one thread loop and the start of the next is the barrier.
    } else if (const WarpShuffle* w = s.as<WarpShuffle>()) {
      // Its own loop over the threads: every thread's value is final when it starts.
      const SimtArray* dst = find_local_array(k_, w->dst);
      TR_CHECK(dst != nullptr, "shuffle into '" + w->dst + "'");
      Type t = storage_type(dst->dtype);
      emit_loop("lane", b_.getInt64(0), b_.getInt64(k_.sig.threads), [&](llvm::Value* tid) {
        llvm::Value* partner = b_.CreateXor(tid, b_.getInt64(w->lane_xor));
        llvm::Value* v = nullptr;
        with_binding(kThreadIdx, partner,
                     [&] { v = b_.CreateLoad(llvm_type(t), element_ptr(w->src, make_i64(0), t)); });
        with_binding(kThreadIdx, tid,
                     [&] { b_.CreateStore(v, element_ptr(w->dst, make_i64(0), t)); });
      });
    } else if (const WarpBallot* w = s.as<WarpBallot>()) {
      // Its own loop over the threads: each thread ORs in the flags of its warp's lanes.
      const int64_t lanes = std::min<int64_t>(k_.sig.threads, 32);
      emit_loop("lane", b_.getInt64(0), b_.getInt64(k_.sig.threads), [&](llvm::Value* tid) {
        llvm::Value* base = b_.CreateAnd(tid, b_.getInt64(~int64_t{31}));
        llvm::Value* mask = b_.getInt32(0);
        for (int64_t l = 0; l < lanes; ++l) {
          llvm::Value* v = nullptr;
          with_binding(kThreadIdx, b_.CreateAdd(base, b_.getInt64(l)), [&] {
            v = b_.CreateLoad(b_.getInt32Ty(), element_ptr(w->src, make_i64(0), Type::I32));
          });
          llvm::Value* bit =
              b_.CreateSelect(b_.CreateICmpNE(v, b_.getInt32(0)),
                              b_.getInt32(static_cast<int32_t>(1u << l)), b_.getInt32(0));
          mask = b_.CreateOr(mask, bit);
        }
        with_binding(kThreadIdx, tid,
                     [&] { b_.CreateStore(mask, element_ptr(w->dst, make_i64(0), Type::I32)); });
      });
    } else if (const Gemm* g = s.as<Gemm>()) {
      emit_gemm(g);
    } else if (const LetStmt* let = s.as<LetStmt>()) {
      // Block-uniform (verified): evaluated once per block.
      llvm::Value* v = emit_expr(let->value);
      with_binding(let->name, v, [&] { emit_block_level(let->body); });
    } else if (const For* loop = s.as<For>()) {
      llvm::Value* min = emit_expr(loop->min);
      llvm::Value* extent = emit_expr(loop->extent);
      emit_loop(loop->var, min, extent, [&](llvm::Value* v) {
        with_binding(loop->var, v, [&] { emit_block_level(loop->body); });
      });
    } else {
      TR_CHECK(false, "barrier under a per-thread statement: " + to_string(s));
    }
  }

  void emit_thread_loop(const Stmt& s) {
    if (const Seq* seq = s.as<Seq>(); seq && seq->stmts.empty()) return;
    emit_loop("thread", b_.getInt64(0), b_.getInt64(k_.sig.threads),
              [&](llvm::Value* tid) { with_binding(kThreadIdx, tid, [&] { emit_stmt(s); }); });
  }

  void emit_stmt(const Stmt& s) {
    switch (s->kind) {
      case StmtKind::Seq:
        for (const Stmt& c : s.as<Seq>()->stmts) emit_stmt(c);
        return;
      case StmtKind::LetStmt: {
        const LetStmt* op = s.as<LetStmt>();
        llvm::Value* v = emit_expr(op->value);
        with_binding(op->name, v, [&] { emit_stmt(op->body); });
        return;
      }
      case StmtKind::For: {
        const For* op = s.as<For>();
        llvm::Value* min = emit_expr(op->min);
        llvm::Value* extent = emit_expr(op->extent);
        emit_loop(op->var, min, extent,
                  [&](llvm::Value* v) { with_binding(op->var, v, [&] { emit_stmt(op->body); }); });
        return;
      }
      case StmtKind::IfThenElse: {
        const IfThenElse* op = s.as<IfThenElse>();
        llvm::Value* cond = emit_expr(op->cond);
        llvm::BasicBlock* then_bb = llvm::BasicBlock::Create(ctx_, "then", fn_);
        llvm::BasicBlock* else_bb =
            op->else_case.defined() ? llvm::BasicBlock::Create(ctx_, "else", fn_) : nullptr;
        llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "endif", fn_);
        b_.CreateCondBr(cond, then_bb, else_bb ? else_bb : done);
        b_.SetInsertPoint(then_bb);
        emit_stmt(op->then_case);
        b_.CreateBr(done);
        if (else_bb) {
          b_.SetInsertPoint(else_bb);
          emit_stmt(op->else_case);
          b_.CreateBr(done);
        }
        b_.SetInsertPoint(done);
        return;
      }
      case StmtKind::Store: {
        const Store* op = s.as<Store>();
        llvm::Value* v = emit_expr(op->value);
        b_.CreateStore(v, element_ptr(op->buffer, op->indices[0], op->value.type()));
        return;
      }
      case StmtKind::Assign: {
        const Assign* op = s.as<Assign>();
        b_.CreateStore(emit_expr(op->value), local_ptr(op->name));
        return;
      }
      case StmtKind::VectorMove: {
        // One <lanes x bits> load and store. Aligned only to the element: host buffers need
        // not be 16-byte aligned, and x86 loses nothing on an unaligned vector move.
        const VectorMove* op = s.as<VectorMove>();
        const SimtArray* local = &vector_move_local(k_, *op);
        Type et = storage_type(local->dtype);
        llvm::Type* vt = llvm::FixedVectorType::get(llvm_type(et), op->lanes);
        llvm::Align align(static_cast<uint64_t>(dtype_bytes(local->dtype, 1)));
        llvm::Value* v = b_.CreateAlignedLoad(vt, element_ptr(op->src, op->src_index, et), align);
        b_.CreateAlignedStore(v, element_ptr(op->dst, op->dst_index, et), align);
        return;
      }
      case StmtKind::AsyncCopy: {
        // Copied at once, element by element (the bits cp.async moves): the waits that follow
        // have nothing left to wait for. Lanes past `valid` are zero and read nothing.
        const AsyncCopy* op = s.as<AsyncCopy>();
        const BufferParam* src = find_buffer(k_.sig, op->src);
        TR_CHECK(src != nullptr, "async copy from '" + op->src + "'");
        Type et = storage_type(src->dtype);
        llvm::Value* valid = emit_expr(op->valid);
        for (int l = 0; l < op->lanes; ++l) {
          llvm::BasicBlock* read_bb = llvm::BasicBlock::Create(ctx_, "acp.read", fn_);
          llvm::BasicBlock* zero_bb = llvm::BasicBlock::Create(ctx_, "acp.zero", fn_);
          llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "acp.done", fn_);
          llvm::Value* dst = element_ptr(op->dst, add(op->dst_indices[0], make_i64(l)), et);
          b_.CreateCondBr(b_.CreateICmpSLT(b_.getInt64(l), valid), read_bb, zero_bb);
          b_.SetInsertPoint(read_bb);
          llvm::Value* v = b_.CreateLoad(
              llvm_type(et), element_ptr(op->src, add(op->src_indices[0], make_i64(l)), et));
          b_.CreateStore(v, dst);
          b_.CreateBr(done);
          b_.SetInsertPoint(zero_bb);
          b_.CreateStore(llvm::Constant::getNullValue(llvm_type(et)), dst);
          b_.CreateBr(done);
          b_.SetInsertPoint(done);
        }
        return;
      }
      case StmtKind::AsyncCommit:
      case StmtKind::AsyncWait:
      case StmtKind::MbarrierInit:
      case StmtKind::MbarrierWait:
        return;  // every async copy has completed where it stands
      case StmtKind::GemmWait:
        return;  // so has every gemm
      case StmtKind::TmaCopy:
        return emit_tma_copy(s.as<TmaCopy>());
      default:
        TR_CHECK(false, "statement not valid in SIMT IR at thread level: " + to_string(s));
    }
  }

  // A gemm, once per block between two thread loops: a call of tilerun_cpu_gemm (mma_model.h,
  // the tensor core's model) with every thread's accumulator values, the shared tiles and the
  // gemm's constants.
  void emit_gemm(const Gemm* op) {
    const SimtArray *a = find_shared(k_, op->a), *b = find_shared(k_, op->b);
    TR_CHECK(a && b, "gemm operands are shared arrays");
    // At a stage: tile `stage` of each stack, a row-major tile whose offsets swizzle as the
    // stack's do (whole periods of the swizzle per tile).
    auto tile_shape = [&](const SimtArray* s, bool staged) {
      return staged ? std::vector<int64_t>(s->shape.begin() + 1, s->shape.end()) : s->shape;
    };

    const std::vector<int64_t> sa = tile_shape(a, op->a_staged()),
                               sb = tile_shape(b, op->b_staged());
    GemmDesc d{.m = op->m,
               .n = op->n,
               .k = op->k,
               .threads = k_.sig.threads,
               .a_input = mma_input_of(a->dtype),
               .b_input = mma_input_of(b->dtype),
               .trans_a = op->trans_a,
               .trans_b = op->trans_b,
               // Panels [m / 64, k, 64] as the row-major [m / 64 * k, 64] they are in memory.
               .a_layout = sa.size() == 3 ? compact_row_major({sa[0] * sa[1], sa[2]})
                           : op->a_staged() || !a->layout.rank() ? compact_row_major(sa)
                                                                 : a->layout,
               // N-major b panels [n / 64, k, 64] likewise as [n / 64 * k, 64].
               .b_layout = sb.size() == 3 ? compact_row_major({sb[0] * sb[1], sb[2]})
                           : op->b_staged() || !b->layout.rank() ? compact_row_major(sb)
                                                                 : b->layout,
               .a_swizzle = a->swizzle,
               .b_swizzle = b->swizzle};
    std::vector<int64_t> words = d.encode();
    std::vector<llvm::Constant*> elems;
    for (int64_t w : words) elems.push_back(b_.getInt64(static_cast<uint64_t>(w)));
    auto* at = llvm::ArrayType::get(b_.getInt64Ty(), elems.size());
    auto* desc =
        new llvm::GlobalVariable(m_, at, /*isConstant=*/true, llvm::GlobalValue::PrivateLinkage,
                                 llvm::ConstantArray::get(at, elems), "gemm.desc");
    llvm::Type* ptr = b_.getPtrTy();
    llvm::FunctionCallee fn = m_.getOrInsertFunction(
        "tilerun_cpu_gemm", llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, ptr, ptr}, false));
    const Type bits = storage_type(a->dtype);
    auto acc = array_ptr_.find(op->c);
    TR_CHECK(acc != array_ptr_.end(), "gemm accumulator '" + op->c + "'");
    auto start = [&](const SimtArray* s, bool staged) {
      if (!staged) return make_i64(0);
      TR_CHECK(tiles_whole_swizzle_periods(s->shape, s->swizzle),
               "a stack's tiles are whole periods of its swizzle (tile_verifier)");
      Expr st = op->stage.type() == Type::I64 ? op->stage : Cast::make(Type::I64, op->stage);
      return mul(st, make_i64(stack_tile_elems(s->shape)));
    };
    b_.CreateCall(fn, {acc->second, element_ptr(op->a, start(a, op->a_staged()), bits),
                       element_ptr(op->b, start(b, op->b_staged()), storage_type(b->dtype)), desc});
  }

  // A tma_copy: thread 0 calls tilerun_cpu_tma_copy (tma_model.h) with the tile's first
  // element, the tensor's and the words that describe the box; the copy is done when it returns.
  void emit_tma_copy(const TmaCopy* op) {
    const BufferParam* src = find_buffer(k_.sig, op->src);
    const SimtArray* dst = find_shared(k_, op->dst);
    TR_CHECK(src && dst, "tma_copy from a global input into a shared array");
    const int64_t rank = static_cast<int64_t>(op->box.size());
    const Type bits = storage_type(src->dtype);
    llvm::BasicBlock* issue = llvm::BasicBlock::Create(ctx_, "tma.issue", fn_);
    llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "tma.done", fn_);
    b_.CreateCondBr(b_.CreateICmpEQ(thread_id(), b_.getInt64(0)), issue, done);
    b_.SetInsertPoint(issue);
    // The words in a stack slot made once, in the entry block (not once per loop trip).
    const int64_t words = kTmaDescHeader + 3 * rank;
    llvm::IRBuilder<> entry(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    llvm::AllocaInst* desc = entry.CreateAlloca(b_.getInt64Ty(), b_.getInt64(words), "tma.desc");
    std::vector<llvm::Value*> w = {b_.getInt64(dtype_bytes(src->dtype, 1)), b_.getInt64(rank),
                                   b_.getInt64(dst->swizzle.bits), b_.getInt64(dst->swizzle.base),
                                   b_.getInt64(dst->swizzle.shift)};
    for (const Expr& e : src->shape) w.push_back(emit_expr(e));
    for (int64_t e : op->box) w.push_back(b_.getInt64(e));
    for (const Expr& e : op->src_indices) w.push_back(emit_expr(e));
    for (size_t i = 0; i < w.size(); ++i)
      b_.CreateStore(w[i], b_.CreateInBoundsGEP(b_.getInt64Ty(), desc, b_.getInt64(i)));
    llvm::Type* ptr = b_.getPtrTy();
    llvm::FunctionCallee fn = m_.getOrInsertFunction(
        "tilerun_cpu_tma_copy", llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, ptr}, false));
    b_.CreateCall(fn,
                  {element_ptr(op->dst, op->dst_indices[0], bits), buffer_ptr_.at(op->src), desc});
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }

  // ---- Memory.

  llvm::Value* thread_id() {
    auto it = scope_.find(kThreadIdx);
    TR_CHECK(it != scope_.end(), "per-thread storage used at block level");
    return it->second;
  }

  llvm::Value* element_ptr(const std::string& buffer, const Expr& index, Type t) {
    llvm::Type* et = llvm_type(t);
    llvm::Value* idx = emit_expr(index);
    if (auto it = buffer_ptr_.find(buffer); it != buffer_ptr_.end())
      return b_.CreateInBoundsGEP(et, it->second, idx);
    auto it = array_ptr_.find(buffer);
    TR_CHECK(it != array_ptr_.end(), "unknown buffer '" + buffer + "'");
    if (auto sz = local_array_size_.find(buffer); sz != local_array_size_.end())
      idx = b_.CreateAdd(b_.CreateMul(thread_id(), b_.getInt64(sz->second)), idx);
    return b_.CreateInBoundsGEP(et, it->second, idx);
  }

  llvm::Value* local_ptr(const std::string& name) {
    auto it = local_slot_.find(name);
    TR_CHECK(it != local_slot_.end(), "unknown local '" + name + "'");
    return b_.CreateInBoundsGEP(llvm_type(local_type_[name]), it->second, thread_id());
  }

  // ---- Expressions.

  llvm::Value* emit_expr(const Expr& e) {
    switch (e->kind) {
      case ExprKind::IntImm:
        return llvm::ConstantInt::get(llvm_type(e.type()), e.as<IntImm>()->value, true);
      case ExprKind::FloatImm:
        return llvm::ConstantFP::get(b_.getFloatTy(), e.as<FloatImm>()->value);
      case ExprKind::Var: {
        const Var* op = e.as<Var>();
        if (local_slot_.count(op->name))
          return b_.CreateLoad(llvm_type(op->type), local_ptr(op->name), op->name);
        auto it = scope_.find(op->name);
        TR_CHECK(it != scope_.end(), "unbound '" + op->name + "'");
        return it->second;
      }
      case ExprKind::Binary:
        return emit_binary(e.as<Binary>());
      case ExprKind::Unary: {
        const Unary* op = e.as<Unary>();
        llvm::Value* a = emit_expr(op->a);
        if (op->op == UnaryOp::Not) return b_.CreateNot(a);
        return op->type == Type::F32 ? b_.CreateFNeg(a) : b_.CreateNeg(a);
      }
      case ExprKind::Select: {
        const Select* op = e.as<Select>();
        return b_.CreateSelect(emit_expr(op->cond), emit_expr(op->true_value),
                               emit_expr(op->false_value));
      }
      case ExprKind::Cast:
        return emit_cast(e.as<Cast>());
      case ExprKind::Bitcast: {
        const Bitcast* op = e.as<Bitcast>();
        return b_.CreateBitCast(emit_expr(op->value), llvm_type(op->type));
      }
      case ExprKind::Call: {
        const Call* op = e.as<Call>();
        std::vector<llvm::Value*> args;
        for (const Expr& a : op->args) args.push_back(emit_expr(a));
        if (op->op == CallOp::Bf16Bits) {
          // Round to nearest even on the 16 dropped bits (a carry into the exponent rounds up to
          // the next binade or to inf); a NaN to 0x7fc0.
          llvm::Value* b = b_.CreateBitCast(args[0], b_.getInt32Ty());
          llvm::Value* lsb = b_.CreateAnd(b_.CreateLShr(b, 16), b_.getInt32(1));
          llvm::Value* r =
              b_.CreateLShr(b_.CreateAdd(b_.CreateAdd(b, b_.getInt32(0x7fff)), lsb), 16);
          llvm::Value* nan = b_.CreateFCmpUNO(args[0], args[0]);
          return b_.CreateTrunc(b_.CreateSelect(nan, b_.getInt32(0x7fc0), r), b_.getInt16Ty());
        }
        TR_CHECK(op->op == CallOp::Fma || op->op == CallOp::Sqrt,
                 std::string("unexpanded call ") + call_op_name(op->op));
        auto id = op->op == CallOp::Fma ? llvm::Intrinsic::fma : llvm::Intrinsic::sqrt;
        return b_.CreateIntrinsic(id, {b_.getFloatTy()}, args);
      }
      case ExprKind::Let: {
        const Let* op = e.as<Let>();
        llvm::Value* v = emit_expr(op->value);
        llvm::Value* out = nullptr;
        with_binding(op->name, v, [&] { out = emit_expr(op->body); });
        return out;
      }
      case ExprKind::Load: {
        const Load* op = e.as<Load>();
        return b_.CreateLoad(llvm_type(op->type),
                             element_ptr(op->buffer, op->indices[0], op->type));
      }
    }
    TR_CHECK(false, "unknown expression kind");
  }

  llvm::Value* emit_binary(const Binary* op) {
    llvm::Value* a = emit_expr(op->a);
    llvm::Value* b = emit_expr(op->b);
    const bool f = op->a.type() == Type::F32;
    switch (op->op) {
      case BinaryOp::Add:
        return f ? b_.CreateFAdd(a, b) : b_.CreateAdd(a, b);
      case BinaryOp::Sub:
        return f ? b_.CreateFSub(a, b) : b_.CreateSub(a, b);
      case BinaryOp::Mul:
        return f ? b_.CreateFMul(a, b) : b_.CreateMul(a, b);
      case BinaryOp::Div: {
        if (f) return b_.CreateFDiv(a, b);
        // Floor division: truncate, then step down when the remainder's sign differs from b's.
        llvm::Value* q = b_.CreateSDiv(a, b);
        llvm::Value* r = b_.CreateSRem(a, b);
        llvm::Value* adjust = floor_adjust(r, b);
        return b_.CreateSub(q, b_.CreateZExt(adjust, a->getType()));
      }
      case BinaryOp::Mod: {
        llvm::Value* r = b_.CreateSRem(a, b);
        return b_.CreateSelect(floor_adjust(r, b), b_.CreateAdd(r, b), r);
      }
      case BinaryOp::Min:
        TR_CHECK(!f, "f32 min survived expand_strict_math");
        return b_.CreateSelect(b_.CreateICmpSLT(a, b), a, b);
      case BinaryOp::Max:
        TR_CHECK(!f, "f32 max survived expand_strict_math");
        return b_.CreateSelect(b_.CreateICmpSGT(a, b), a, b);
      case BinaryOp::And:
        return b_.CreateAnd(a, b);
      case BinaryOp::Or:
        return b_.CreateOr(a, b);
      case BinaryOp::Xor:
        return b_.CreateXor(a, b);
      case BinaryOp::Shl:
        return b_.CreateShl(a, b);
      case BinaryOp::ShrL:
        return b_.CreateLShr(a, b);
      case BinaryOp::ShrA:
        return b_.CreateAShr(a, b);
      case BinaryOp::Eq:
        return f ? b_.CreateFCmpOEQ(a, b) : b_.CreateICmpEQ(a, b);
      case BinaryOp::Ne:
        return f ? b_.CreateFCmpUNE(a, b) : b_.CreateICmpNE(a, b);
      case BinaryOp::Lt:
        return f ? b_.CreateFCmpOLT(a, b) : b_.CreateICmpSLT(a, b);
      case BinaryOp::Le:
        return f ? b_.CreateFCmpOLE(a, b) : b_.CreateICmpSLE(a, b);
      case BinaryOp::Gt:
        return f ? b_.CreateFCmpOGT(a, b) : b_.CreateICmpSGT(a, b);
      case BinaryOp::Ge:
        return f ? b_.CreateFCmpOGE(a, b) : b_.CreateICmpSGE(a, b);
      case BinaryOp::LtU:
        return b_.CreateICmpULT(a, b);
    }
    TR_CHECK(false, "unknown binary op");
  }

  // r != 0 && (r < 0) != (b < 0)
  llvm::Value* floor_adjust(llvm::Value* r, llvm::Value* b) {
    llvm::Value* zero = llvm::ConstantInt::get(r->getType(), 0);
    llvm::Value* signs_differ =
        b_.CreateICmpNE(b_.CreateICmpSLT(r, zero), b_.CreateICmpSLT(b, zero));
    return b_.CreateAnd(b_.CreateICmpNE(r, zero), signs_differ);
  }

  llvm::Value* emit_cast(const Cast* op) {
    llvm::Value* v = emit_expr(op->value);
    Type from = op->value.type(), to = op->type;
    llvm::Type* t = llvm_type(to);
    if (from == to) return v;
    if (from == Type::Bool) return to == Type::F32 ? b_.CreateUIToFP(v, t) : b_.CreateZExt(v, t);
    if (is_int(from) && is_int(to)) return b_.CreateSExtOrTrunc(v, t);
    if (is_int(from)) return b_.CreateSIToFP(v, t);  // round to nearest even
    // f32 → int: truncate toward zero, saturate, NaN → 0 — the IR's definition, which
    // llvm.fptosi.sat implements exactly (and CUDA's cvt.rzi.sat likewise).
    return b_.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {t, b_.getFloatTy()}, {v});
  }

  const SimtKernel& k_;
  llvm::LLVMContext& ctx_;
  llvm::Module& m_;
  llvm::IRBuilder<> b_;
  llvm::Function* fn_ = nullptr;
  std::map<std::string, llvm::Value*> scope_;
  std::map<std::string, llvm::Value*> buffer_ptr_, array_ptr_, local_slot_;
  std::map<std::string, int64_t> local_array_size_;
  std::map<std::string, Type> local_type_;
};

}  // namespace

CpuModule codegen_cpu(const SimtKernel& kernel) {
  CpuModule out;
  out.context = std::make_unique<llvm::LLVMContext>();
  out.module = std::make_unique<llvm::Module>(kernel.sig.name, *out.context);
  out.block_storage_bytes = CpuCodegen(kernel, *out.context, *out.module).run();
  std::string err;
  llvm::raw_string_ostream os(err);
  TR_CHECK(!llvm::verifyModule(*out.module, &os),
           "invalid LLVM IR for '" + kernel.sig.name + "': " + os.str());
  return out;
}

}  // namespace tilerun::compiler
